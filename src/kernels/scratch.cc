#include "kernels/scratch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace vls::kernels {

ScratchBuffer::~ScratchBuffer() { std::free(data_); }

void* ScratchBuffer::Reserve(size_t bytes) {
  const size_t held = bytes_.load(std::memory_order_relaxed);
  if (bytes <= held && data_ != nullptr) return data_;
  // The old contents are not copied: every user rewrites what it reads.
  std::free(data_);
  data_ = nullptr;
  bytes_.store(0, std::memory_order_relaxed);
  const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, n);
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, n);
  bytes_.store(n, std::memory_order_relaxed);
  return data_;
}

Q8Activations& ScratchArena::Q8(int64_t rows, int64_t cols) {
  q8_.Resize(rows, cols);
  q8_bytes_.store(q8_.q.capacity() + q8_.scales.capacity() * sizeof(float),
                  std::memory_order_relaxed);
  return q8_;
}

size_t ScratchArena::bytes() const {
  return matmul_x.bytes() + attention.bytes() + onednn.bytes() + onednn_x.bytes() + layer.bytes() +
         embed_row.bytes() + head.bytes() + rope.bytes() +
         q8_bytes_.load(std::memory_order_relaxed);
}

}  // namespace vls::kernels
