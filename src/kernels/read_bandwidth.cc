#include "kernels/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vls::kernels {

namespace {

// Sums of 64-byte lines [b, e) of p: vector loads where the CPU has them (this file is built
// for baseline x86-64, whose 16-byte loads would measure the core, not the memory).
uint64_t SumLinesScalar(const uint8_t* p, int64_t b, int64_t e) {
  uint64_t acc[8] = {};
  for (int64_t l = b; l < e; ++l) {
    const auto* q = reinterpret_cast<const uint64_t*>(p + l * 64);
    for (int j = 0; j < 8; ++j) acc[j] += q[j];
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t SumLinesAvx512(const uint8_t* p, int64_t b, int64_t e) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t l = b;
  for (; l + 4 <= e; l += 4) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + l * 64));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + l * 64 + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + l * 64 + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + l * 64 + 192));
  }
  for (; l < e; ++l) a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + l * 64));
  // Stored and summed: _mm512_reduce_add_epi64 trips GCC 12's -Wuninitialized (bug 105593).
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t total = 0;
  for (uint64_t v : out) total += v;
  return total;
}
__attribute__((target("avx2"))) uint64_t SumLinesAvx2(const uint8_t* p, int64_t b, int64_t e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t l = b;
  for (; l + 2 <= e; l += 2) {
    const auto* q = reinterpret_cast<const __m256i*>(p + l * 64);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(q));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(q + 1));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(q + 2));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(q + 3));
  }
  for (; l < e; ++l) {
    const auto* q = reinterpret_cast<const __m256i*>(p + l * 64);
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_load_si256(q), _mm256_load_si256(q + 1)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return out[0] + out[1] + out[2] + out[3];
}
#endif

using SumLinesFn = uint64_t (*)(const uint8_t*, int64_t, int64_t);
SumLinesFn ChooseSumLines() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SumLinesAvx512;
  if (__builtin_cpu_supports("avx2")) return SumLinesAvx2;
#endif
  return SumLinesScalar;
}

}  // namespace

uint64_t SumLines(ThreadPool& pool, const void* p, int64_t lines) {
  static const SumLinesFn sum_lines = ChooseSumLines();
  const auto* bytes = static_cast<const uint8_t*>(p);
  std::vector<uint64_t> sums(static_cast<size_t>(pool.threads()), 0);
  pool.ParallelFor(lines, 4096, [&](int64_t b, int64_t e, int thread) {
    sums[static_cast<size_t>(thread)] += sum_lines(bytes, b, e);
  });
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  return total;
}

double ReadBandwidth(ThreadPool& pool, const void* p, int64_t bytes, int passes) {
  const int64_t lines = bytes / 64;
  double best = 0.0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t sum = SumLines(pool, p, lines);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The sum is used (as an asm operand), so the loads are never optimised away.
    asm volatile("" : : "r"(sum));
    best = std::max(best, static_cast<double>(lines * 64) / s);
  }
  return best;
}

}  // namespace vls::kernels
