#include "kernels/gemm_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernels/bf16_blocked.h"
#include "kernels/onednn_matmul.h"
#include "kernels/scratch.h"
#include "tensor/dtype.h"

namespace vls::kernels {

namespace {

// Deterministic values in [-1, 1) (no dependence on a random engine's state).
std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return v;
}

template <typename F>
double Micros(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string GemmProbe::ToString() const {
  if (!ran) return "BF16 GEMM probe: not run";
  char line[256];
  std::snprintf(
      line, sizeof line,
      "BF16 GEMM probe (M %lld / %lld): f32 FMA %.0f / %.0f us, BF16 dot %.0f / %.0f us%s",
      static_cast<long long>(kGemmProbeSmallRows), static_cast<long long>(kGemmProbeLargeRows),
      fma_small_us, fma_large_us, dot_small_us, dot_large_us,
      onednn ? " (oneDNN at the larger)" : "");
  return line;
}

GemmProbe ProbeBf16Gemm(const KernelVariant& dot, const KernelVariant& fma, bool onednn) {
  constexpr int64_t K = kGemmProbeK, N = kGemmProbeN, M = kGemmProbeLargeRows;
  // [N, K] weights in the blocked layout (zero padding: the buffer starts zeroed).
  const std::vector<float> wf = Values(static_cast<size_t>(N * K), 1);
  // 64-byte aligned, as prepared weights are.
  std::vector<uint16_t> wbuf(static_cast<size_t>(Bf16BlockedBytes(N, K) / 2 + 32), 0);
  uint16_t* wb = wbuf.data() + (64 - reinterpret_cast<uintptr_t>(wbuf.data()) % 64) % 64 / 2;
  PackBf16Blocked(Matrix{DType::kF32, wf.data(), N, K}, 0, N, wb, N, 0);
  const Matrix w = Bf16BlockedMatrixAt(wb, N, K);
  const std::vector<float> xf = Values(static_cast<size_t>(M * K), 2);
  std::vector<uint16_t> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xb[i] = F32ToBf16(xf[i]);
  std::vector<float> y(static_cast<size_t>(M * N));
  ScratchArena arena;

  GemmProbe probe;
  probe.ran = true;
  probe.onednn = onednn;
  auto dot_large = [&] {
    if (probe.onednn &&
        OneDnnMatMulBf16BlockedRows(xb.data(), M, K, w, 0, M, y.data(), &arena).ok()) {
      return;
    }
    probe.onednn = false;  // oneDNN failed: Context would run the own kernel, so time that
    dot.matmul_bf16_blocked(xb.data(), M, K, w, 0, N, y.data());
  };
  // One untimed round first: oneDNN compiles its kernel, the pages and caches warm.
  dot_large();
  fma.matmul_bf16_blocked(xb.data(), M, K, w, 0, N, y.data());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  probe.dot_small_us = probe.fma_small_us = probe.dot_large_us = probe.fma_large_us = kInf;
  for (int r = 0; r < kGemmProbeReps; ++r) {
    constexpr int64_t S = kGemmProbeSmallRows;
    probe.dot_small_us =
        std::min(probe.dot_small_us,
                 Micros([&] { dot.matmul_bf16_blocked(xb.data(), S, K, w, 0, N, y.data()); }));
    probe.fma_small_us =
        std::min(probe.fma_small_us,
                 Micros([&] { fma.matmul_bf16_blocked(xb.data(), S, K, w, 0, N, y.data()); }));
    probe.dot_large_us = std::min(probe.dot_large_us, Micros(dot_large));
    probe.fma_large_us =
        std::min(probe.fma_large_us,
                 Micros([&] { fma.matmul_bf16_blocked(xb.data(), M, K, w, 0, N, y.data()); }));
  }
  return probe;
}

}  // namespace vls::kernels
