// AVX-512 RMSNorm, SiLU·up, weighted rows, BF16 rounding and RoPE (KernelVariant::rms_norm,
// silu_mul, weighted_rows, to_bf16, apply_rope), shared by every AVX-512 variant. Compiled with
// the AVX-512 flags; only called after the CPU check in dispatch.cc.
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

void WeightedRows(const float* w, const float* const* rows, int64_t k, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 t = Tail(n - i);
    __m512 o = _mm512_setzero_ps();
    for (int64_t j = 0; j < k; ++j) {
      o = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), _mm512_maskz_loadu_ps(t, rows[j] + i), o);
    }
    _mm512_mask_storeu_ps(out + i, t, o);
  }
}

void ToBf16(const float* x, int64_t n, uint16_t* out) {
  // F32ToBf16 in integers: add 0x7fff plus the lowest kept bit, keep the high half; a NaN keeps
  // its high half with the quiet bit set.
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = Tail(n - i);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, x + i));
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(hi, one))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i v = _mm512_mask_or_epi32(r, nan, hi, quiet);
    _mm256_mask_storeu_epi16(out + i, k, _mm512_cvtepi32_epi16(v));
  }
}

void ApplyRope(float* x, const float* cos, const float* sin, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; i += 16) {
    const __mmask16 k = Tail(half - i);
    const __m512 a = _mm512_maskz_loadu_ps(k, x + i), b = _mm512_maskz_loadu_ps(k, x + half + i);
    const __m512 c = _mm512_maskz_loadu_ps(k, cos + i), s = _mm512_maskz_loadu_ps(k, sin + i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
    _mm512_mask_storeu_ps(x + half + i, k, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
  }
}

}  // namespace vls::kernels::avx512_internal
