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
  q8_bytes_.store(q8_.q.capacity() + q8_.scales.capacity() * sizeof(float) +
                      q8_.zero_terms.capacity() * sizeof(int32_t),
                  std::memory_order_relaxed);
  return q8_;
}

Q8Activations* ScratchArena::GroupedQ8(std::span<const int64_t> rows, int64_t cols) {
  if (grouped_q8_.size() < rows.size()) grouped_q8_.resize(rows.size());
  size_t held = 0;
  for (size_t i = 0; i < grouped_q8_.size(); ++i) {
    if (i < rows.size()) grouped_q8_[i].Resize(rows[i], cols);
    held += grouped_q8_[i].q.capacity() + grouped_q8_[i].scales.capacity() * sizeof(float) +
            grouped_q8_[i].zero_terms.capacity() * sizeof(int32_t);
  }
  grouped_q8_bytes_.store(held, std::memory_order_relaxed);
  return grouped_q8_.data();
}

size_t ScratchArena::bytes() const {
  return matmul_x.bytes() + attention.bytes() + onednn.bytes() + onednn_x.bytes() + layer.bytes() +
         embed_row.bytes() + head.bytes() + rope.bytes() +
         q8_bytes_.load(std::memory_order_relaxed) +
         grouped_q8_bytes_.load(std::memory_order_relaxed);
}

}  // namespace vls::kernels
