// RowPrologue: a per-call transform of a product's input rows (quantizing, rounding to BF16) run
// inside the product's own parallel loop (Context::MatMul's Q8/Q4/BF16 blocked paths and
// Context::MatMulGrouped). Internal to the kernels.
#ifndef VLSTACK_KERNELS_ROW_PROLOGUE_H_
#define VLSTACK_KERNELS_ROW_PROLOGUE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "base/thread_pool.h"

namespace vls::kernels {

// Runs inside the loop rather than as a serial pass or a separate one before it: each
// participant first claims groups of rows and transforms them, then waits for groups that others
// are still working on, then takes its share of the product. At 8-row batched decode a serial
// pass cost 3-6 µs per product (the rows were just written by both cores) while the other thread
// waited. The wait ends: a group is only claimed by a running participant, which finishes it
// before it takes anything else.
class RowPrologue {
 public:
  // Up to 16 rows a group; below 16 rows × threads, one group per thread.
  RowPrologue(int64_t rows, int64_t threads)
      : rows_(rows),
        per_group_(std::clamp<int64_t>((rows + threads - 1) / threads, 1, 16)),
        groups_((rows + per_group_ - 1) / per_group_) {}

  // Called at the start of every chunk of the loop: fn(r0, r1) transforms rows [r0, r1).
  template <typename Fn>
  void Run(const Fn& fn) {
    if (done_.load(std::memory_order_acquire) >= groups_) return;
    for (int64_t g = next_.fetch_add(1, std::memory_order_relaxed); g < groups_;
         g = next_.fetch_add(1, std::memory_order_relaxed)) {
      fn(g * per_group_, std::min(rows_, (g + 1) * per_group_));
      done_.fetch_add(1, std::memory_order_release);
    }
    while (done_.load(std::memory_order_acquire) < groups_) CpuRelax();
  }

 private:
  const int64_t rows_, per_group_, groups_;
  std::atomic<int64_t> next_{0}, done_{0};
};

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_ROW_PROLOGUE_H_
