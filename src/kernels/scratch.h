// Working memory a kernels::Context keeps for each participant of its thread pool (caller 0,
// workers 1..n-1; base/thread_pool.h), so ops reuse their buffers across calls instead of
// allocating them per call: a fresh multi-megabyte buffer comes back from the allocator as new
// pages, and their faults and zero fills once cost about a quarter of prefill time.
//
// Who may use an arena: the thread that is its participant right now, i.e. a loop body told
// that participant, or the holder of a ThreadPool::Lease (participant 0 from outside the pool).
// The pool serialises its callers, so an arena never needs a lock. The memory stays with the
// Context (one model) and is counted by Context::ScratchBytes().
#ifndef VLSTACK_KERNELS_SCRATCH_H_
#define VLSTACK_KERNELS_SCRATCH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/quant.h"

namespace vls::kernels {

// A 64-byte-aligned buffer that grows on demand and keeps its memory until destroyed.
// Thread safety: Reserve by the arena's participant only; bytes() from any thread.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least `bytes` bytes. When the buffer has to grow, it is reallocated zeroed (what it held
  // is lost); otherwise it holds what its last user left there. Throws std::bad_alloc when out
  // of memory, as a std::vector in its place would.
  void* Reserve(size_t bytes);
  template <typename T>
  T* Reserve(size_t count) {
    return static_cast<T*>(Reserve(count * sizeof(T)));
  }

  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::atomic<size_t> bytes_{0};
};

// The arena of one participant: one buffer per user, named, so two users that run one inside
// the other (a matmul inside a model layer) never share a buffer, and what each holds is plain.
struct ScratchArena {
  // The kernels.
  ScratchBuffer matmul_x;   // Context::MatMul: the activations rounded to BF16, [M, K]
  ScratchBuffer attention;  // the AVX-512 attention kernel's state of one work item
  ScratchBuffer onednn;     // oneDNN's scratchpad for one primitive run
  ScratchBuffer onednn_x;   // OneDnnMatMulRoundingX: the activations rounded to BF16, [M, K]
  // The model (model/).
  ScratchBuffer layer;      // Qwen3Model: one layer's activations for a chunk of rows
  ScratchBuffer embed_row;  // Qwen3Model::Embed: one embedding row as stored
  ScratchBuffer head;       // Qwen3Model::Attention: one key head, normalised and rotated
  ScratchBuffer rope;       // Rope::CachedCosSin: the cos/sin cache

  // Context::MatMul with Q8 weights: the activations quantized per call, sized for [rows, cols]
  // (Q8Activations::Resize).
  Q8Activations& Q8(int64_t rows, int64_t cols);
  // Context::MatMulGrouped with Q8 weights: one set of activations per product, entry i sized
  // for [rows[i], cols] (0 rows for a product that needs none). Valid until the next call.
  Q8Activations* GroupedQ8(std::span<const int64_t> rows, int64_t cols);

  // Bytes held now. Callable from any thread, also while the arena is in use.
  size_t bytes() const;

 private:
  Q8Activations q8_;
  std::atomic<size_t> q8_bytes_{0};
  std::vector<Q8Activations> grouped_q8_;
  std::atomic<size_t> grouped_q8_bytes_{0};
};

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_SCRATCH_H_
