// The memory read roof: how fast a thread pool reads a region that does not fit in the caches.
// `moe_bench` normalises its expert products by it (of_read_bw), and `vlstack bench` compares a
// mixture-of-experts decode step with it, reading the model's own prepared weights (issue 32:
// "the step time within 1.2x of the time those bytes take at the measured read bandwidth").
//
// Each thread sums 64-byte lines of contiguous 256 KiB chunks (one stream per thread, as the
// decode tiles read) with the widest vector loads the CPU has; the sum keeps the loads live.
#ifndef VLSTACK_KERNELS_READ_BANDWIDTH_H_
#define VLSTACK_KERNELS_READ_BANDWIDTH_H_

#include <cstdint>

#include "base/thread_pool.h"

namespace vls::kernels {

// The sum, as 64-bit lanes, of every 8-byte word of lines [0, lines) of `p` (wrapping), over
// the pool. REQUIRES: p 64-byte aligned, holding lines · 64 bytes.
uint64_t SumLines(ThreadPool& pool, const void* p, int64_t lines);

// The best of `passes` passes of SumLines over the whole 64-byte lines of [p, p + bytes):
// bytes per second. REQUIRES: p 64-byte aligned; bytes >= 64; passes >= 1.
double ReadBandwidth(ThreadPool& pool, const void* p, int64_t bytes, int passes);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_READ_BANDWIDTH_H_
