// AVX2 RMSNorm, SiLU·up, weighted rows, BF16 rounding and RoPE (KernelVariant::rms_norm,
// silu_mul, weighted_rows, to_bf16, apply_rope), the AVX-512 ones (elementwise_avx512.cc) on 8
// lanes. Compiled with the AVX2 flags; only called after the CPU check in dispatch.cc.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/avx2_internal.h"
#include "kernels/avx2_math.h"
#include "tensor/dtype.h"

namespace vls::kernels::avx2_internal {

namespace {

void RmsNorm(const float* x, int64_t M, int64_t n, const float* weight, float eps, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * n;
    // Four accumulators: the sum of squares is bound by FMA throughput, not by the latency of
    // one chain.
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      for (int j = 0; j < 4; ++j) {
        const __m256 v = _mm256_loadu_ps(xm + i + 8 * j);
        acc[j] = _mm256_fmadd_ps(v, v, acc[j]);
      }
    }
    for (; i < n; i += 8) {
      const __m256 v = _mm256_maskload_ps(xm + i, TailMask8(n - i));
      acc[0] = _mm256_fmadd_ps(v, v, acc[0]);
    }
    const float ss =
        ReduceAdd(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(n) + eps));
    float* om = out + m * n;
    for (i = 0; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xm + i), inv);
      _mm256_storeu_ps(om + i, _mm256_mul_ps(v, _mm256_loadu_ps(weight + i)));
    }
    if (i < n) {
      const __m256i k = TailMask8(n - i);
      const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(xm + i, k), inv);
      _mm256_maskstore_ps(om + i, k, _mm256_mul_ps(v, _mm256_maskload_ps(weight + i, k)));
    }
  }
}

// SiLU(g)·up of 8 lanes.
inline __m256 SiluMul8(__m256 g, __m256 up) {
  // g / (1 + exp(-g)): exp(-g) is 0 for g > 87 (result g) and +inf below about -88.7 (result
  // -0), as in the reference.
  const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(gate + i, SiluMul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i k = TailMask8(n - i);
    _mm256_maskstore_ps(gate + i, k,
                        SiluMul8(_mm256_maskload_ps(gate + i, k), _mm256_maskload_ps(up + i, k)));
  }
}

// F32ToBf16 of 8 values as 8 int32 (high halves zero): add 0x7fff plus the lowest kept bit and
// keep the high half; a NaN keeps its high half with the quiet bit set.
inline __m256i Bf16Bits8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i round =
      _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, round), 16);
  // |u| <= 0x7fffffff: the signed compare is the unsigned one.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

void ToBf16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus works per 128-bit lane ([a0-3 b0-3 a4-7 b4-7]); the permute restores the order.
    // Every value fits 16 bits, so the unsigned saturation never applies.
    const __m256i p = _mm256_packus_epi32(Bf16Bits8(_mm256_loadu_ps(x + i)),
                                          Bf16Bits8(_mm256_loadu_ps(x + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
  }
  for (; i < n; ++i) out[i] = F32ToBf16(x[i]);
}

void ApplyRope(float* x, const float* cos, const float* sin, int64_t D) {
  const int64_t half = D / 2;
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
    const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
    _mm256_storeu_ps(x + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
    _mm256_storeu_ps(x + half + i, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
  }
  if (i < half) {
    const __m256i k = TailMask8(half - i);
    const __m256 a = _mm256_maskload_ps(x + i, k), b = _mm256_maskload_ps(x + half + i, k);
    const __m256 c = _mm256_maskload_ps(cos + i, k), s = _mm256_maskload_ps(sin + i, k);
    _mm256_maskstore_ps(x + i, k, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
    _mm256_maskstore_ps(x + half + i, k, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
  }
}

void WeightedRows(const float* w, const float* const* rows, int64_t k, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 o = _mm256_setzero_ps();
    for (int64_t j = 0; j < k; ++j) {
      o = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(rows[j] + i), o);
    }
    _mm256_storeu_ps(out + i, o);
  }
  if (i < n) {
    const __m256i m = TailMask8(n - i);
    __m256 o = _mm256_setzero_ps();
    for (int64_t j = 0; j < k; ++j) {
      o = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_maskload_ps(rows[j] + i, m), o);
    }
    _mm256_maskstore_ps(out + i, m, o);
  }
}

}  // namespace

void AddElementwiseKernels(KernelVariant* v) {
  v->rms_norm = RmsNorm;
  v->silu_mul = SiluMul;
  v->weighted_rows = WeightedRows;
  v->to_bf16 = ToBf16;
  v->apply_rope = ApplyRope;
}

}  // namespace vls::kernels::avx2_internal
