// Which BF16 GEMM is faster on this CPU (ADR 0031). On AVX512-BF16 CPUs the prepared BF16
// weights (kernels/bf16_blocked.h) can be multiplied two ways with the same inputs: the BF16 dot
// product (vdpbf16ps: the own kernel at a few rows, oneDNN from kOneDnnMinRows rows), or f32
// fused multiply-adds on the weights widened from BF16 ("avx512"'s kernel). Which is faster
// depends on the core, not on the instruction set it reports: on AMD Zen 5 oneDNN ran at 356
// GFLOP/s per core against 235 for the own dot kernel (ADR 0008), while on an Intel Xeon
// (Sapphire Rapids class, AMX not exposed) the FMA kernel runs 1.3x the dot product, oneDNN
// included (ADR 0031). So DefaultVariant times both once per process and keeps "avx512bf16"
// unless "avx512bf16-fma" is clearly faster.
//
// Thread safety: ProbeBf16Gemm may run on any thread; it allocates its own buffers and uses no
// thread pool (one thread).
#ifndef VLSTACK_KERNELS_GEMM_PROBE_H_
#define VLSTACK_KERNELS_GEMM_PROBE_H_

#include <cstdint>
#include <string>

#include "kernels/dispatch.h"

namespace vls::kernels {

// The shapes timed: a decode-sized product and a prefill chunk's, both [*, 1024] x [1024,
// 1024]ᵀ on one thread (about 0.1 and 1.5 ms here), each path kGemmProbeReps times,
// interleaved, the best time kept (a descheduled run only ever makes a path look slower).
inline constexpr int64_t kGemmProbeSmallRows = 8;
inline constexpr int64_t kGemmProbeLargeRows = 64;
inline constexpr int64_t kGemmProbeK = 1024;
inline constexpr int64_t kGemmProbeN = 1024;
inline constexpr int kGemmProbeReps = 5;
// The FMA path is chosen only when it takes at most this fraction of the dot path's time at
// both shapes, so a CPU where the two are close keeps one choice from run to run.
inline constexpr double kGemmProbeMargin = 0.9;

struct GemmProbe {
  bool ran = false;     // false: no choice was measured (VLS_KERNELS set, or not AVX512-BF16)
  bool onednn = false;  // the dot path's large product went through oneDNN
  double dot_small_us = 0, fma_small_us = 0;  // kGemmProbeSmallRows rows, best of the reps
  double dot_large_us = 0, fma_large_us = 0;  // kGemmProbeLargeRows rows

  bool FmaFaster() const {
    return ran && fma_small_us <= kGemmProbeMargin * dot_small_us &&
           fma_large_us <= kGemmProbeMargin * dot_large_us;
  }
  // One line for `vlstack --version` and the logs, e.g. "BF16 GEMM probe (M 8 / 64): f32 FMA
  // 95 / 1210 us, BF16 dot 130 / 1580 us (oneDNN at 64)".
  std::string ToString() const;
};

// Times `dot`'s BF16 blocked matmul (through oneDNN at kGemmProbeLargeRows when `onednn`)
// against `fma`'s. REQUIRES: both variants have matmul_bf16_blocked.
GemmProbe ProbeBf16Gemm(const KernelVariant& dot, const KernelVariant& fma, bool onednn);

// The probe behind DefaultVariant()'s choice (ran == false when it made none).
const GemmProbe& DefaultVariantProbe();

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_GEMM_PROBE_H_
