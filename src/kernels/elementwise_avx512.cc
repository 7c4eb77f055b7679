// AVX-512 RMSNorm and SiLU·up (KernelVariant::rms_norm / silu_mul), shared by every AVX-512
// variant. Compiled with the AVX-512 flags; only called after the CPU check in dispatch.cc.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/avx512_math.h"
#include "kernels/dispatch.h"

namespace vls::kernels::avx512_internal {

namespace {
__mmask16 Tail(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
}
}  // namespace

void RmsNorm(const float* x, int64_t M, int64_t n, const float* weight, float eps, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * n;
    // Four accumulators of 16 lanes: the sum of squares is bound by FMA throughput, not by
    // the latency of one chain.
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      for (int j = 0; j < 4; ++j) {
        const __m512 v = _mm512_loadu_ps(xm + i + 16 * j);
        acc[j] = _mm512_fmadd_ps(v, v, acc[j]);
      }
    }
    for (; i < n; i += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(Tail(n - i), xm + i);
      acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
    }
    const float ss = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(n) + eps));
    float* om = out + m * n;
    for (i = 0; i < n; i += 16) {
      const __mmask16 k = Tail(n - i);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xm + i), inv);
      _mm512_mask_storeu_ps(om + i, k, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, weight + i)));
    }
  }
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = Tail(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
    // g / (1 + exp(-g)): exp(-g) is 0 for g > 87 (result g) and +inf for g < -88 (result -0).
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
  }
}

}  // namespace vls::kernels::avx512_internal
