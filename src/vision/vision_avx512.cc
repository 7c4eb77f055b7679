// AVX-512 loops of the vision tower's fast path (vision_ops.h), compiled with AVX-512 flags
// (tower.cmake) and called only when the context's kernel variant is an AVX-512 one, which
// dispatch.cc picks only on CPUs that have it.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/avx512_math.h"
#include "vision/vision_attention.h"
#include "vision/vision_ops.h"

namespace vls::vision_internal {

// y = GELU_tanh(y + b) as (y + b) · sigmoid(2u), u = sqrt(2/π)·(x + 0.044715·x³): the same
// function as 0.5·x·(1 + tanh(u)) without tanh's cancellation near u = 0.
void AddBiasGeluTanhAvx512(float* y, const float* b, int64_t n) {
  using kernels::avx512_internal::Exp;
  const __m512 c = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 k = _mm512_set1_ps(0.044715f);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 x =
        _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, b + i));
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 e = Exp(_mm512_mul_ps(c, _mm512_fmadd_ps(k, x3, x)));  // exp(−2u)
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(x, _mm512_add_ps(one, e)));
  }
}

}  // namespace vls::vision_internal

namespace vls::vision_internal {

// exp as 2^(s·c − max·c), c = scale·log2(e) (one
// fused multiply-add, then 2^n · p(f) with a degree-5 polynomial, relative error below 3e-6:
// far under the BF16 rounding that follows), BF16 rounding (nearest even; the values are
// finite, in (0, 1]) and the sum of the rounded values.
float RowMaxAvx512(const float* s, int64_t n) {
  const auto mask = [n](int64_t i) {
    return n - i >= 16 ? static_cast<__mmask16>(0xffff)
                       : static_cast<__mmask16>((1u << (n - i)) - 1u);
  };
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    mx = _mm512_mask_max_ps(mx, mask(i), mx, _mm512_maskz_loadu_ps(mask(i), s + i));
  }
  return _mm512_reduce_max_ps(mx);
}

float ExpRowToBf16Avx512(const float* s, int64_t n, float scale, float max, uint16_t* p) {
  const auto mask = [n](int64_t i) {
    return n - i >= 16 ? static_cast<__mmask16>(0xffff)
                       : static_cast<__mmask16>((1u << (n - i)) - 1u);
  };
  const float c = scale * 1.4426950408889634f;
  const __m512 cv = _mm512_set1_ps(c);
  const __m512 off = _mm512_set1_ps(-max * c);
  const __m512i round = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask(i);
    const __m512 t = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, s + i), cv, off);  // <= ~0
    const __m512 nn = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, nn);  // [-0.5, 0.5]
    __m512 q = _mm512_set1_ps(1.3333558146e-3f);
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.6181291076e-3f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.5504108665e-2f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.4022650696e-1f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.9314718056e-1f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
    const __mmask16 live = _mm512_mask_cmp_ps_mask(k, t, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
    const __m512 e = _mm512_maskz_scalef_ps(live, q, nn);
    const __m512i b = _mm512_castps_si512(e);
    const __m512i r = _mm512_add_epi32(
        b, _mm512_add_epi32(round, _mm512_and_si512(_mm512_srli_epi32(b, 16), one)));
    const __m512i hi = _mm512_srli_epi32(r, 16);
    _mm256_mask_storeu_epi16(p + i, k, _mm512_cvtepi32_epi16(hi));
    sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
  }
  return _mm512_reduce_add_ps(sum);
}

}  // namespace vls::vision_internal

namespace vls::vision_internal {
namespace {

__mmask16 TailMask(int64_t n, int64_t i) {
  return n - i >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (n - i)) - 1u);
}

}  // namespace

void AddRowsAvx512(float* x, const float* y, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n, i);
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, b + i));
    if (y != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(x + i, m, v);
  }
}

// Mean, then the centred sum of squares, in 16 f32 lanes each (rows of a few thousand values:
// a lane sums n/16 of them), the lane totals in double.
void LayerNormRowAvx512(const float* x, int64_t n, const float* w, const float* b, float eps,
                        float* out) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16)
    s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(TailMask(n, i), x + i));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  double sum = 0;
  for (float v : lanes) sum += v;
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  const __m512 mv = _mm512_set1_ps(mean);
  __m512 q = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n, i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), mv);
    q = _mm512_fmadd_ps(d, d, q);
  }
  _mm512_store_ps(lanes, q);
  double sq = 0;
  for (float v : lanes) sq += v;
  const __m512 inv = _mm512_set1_ps(
      static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(eps))));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n, i);
    const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv), inv);
    _mm512_mask_storeu_ps(
        out + i, m,
        _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace vls::vision_internal

namespace vls::vision_internal {
namespace {

// f32 -> BF16, round to nearest even (as F32ToBf16 for finite values and infinities).
__m256i RoundBf16(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i r = _mm512_add_epi32(
      b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                          _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1))));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

__mmask16 Mask16(int64_t n, int64_t i) {
  return n - i >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (n - i)) - 1u);
}

}  // namespace

void PackRowAvx512(const float* row, const float* b, const float* cos, const float* sin,
                   int64_t heads, int64_t hd, int64_t head_stride, uint16_t* q, uint16_t* k,
                   uint16_t* v) {
  const int64_t Dv = heads * hd, half = hd / 2;
  // q and k heads: (x1, x2) = halves of row + b, rotated.
  for (int64_t part = 0; part < 2; ++part) {
    uint16_t* out = part == 0 ? q : k;
    for (int64_t h = 0; h < heads; ++h) {
      const float* x = row + part * Dv + h * hd;
      const float* bb = b + part * Dv + h * hd;
      uint16_t* o = out + h * head_stride;
      for (int64_t i = 0; i < half; i += 16) {
        const __mmask16 m = Mask16(half, i);
        const __m512 x1 =
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, bb + i));
        const __m512 x2 = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + half + i),
                                        _mm512_maskz_loadu_ps(m, bb + half + i));
        const __m512 c = _mm512_maskz_loadu_ps(m, cos + i);
        const __m512 s = _mm512_maskz_loadu_ps(m, sin + i);
        _mm256_mask_storeu_epi16(o + i, m, RoundBf16(_mm512_fmsub_ps(x1, c, _mm512_mul_ps(x2, s))));
        _mm256_mask_storeu_epi16(o + half + i, m,
                                 RoundBf16(_mm512_fmadd_ps(x2, c, _mm512_mul_ps(x1, s))));
      }
    }
  }
  for (int64_t i = 0; i < Dv; i += 16) {
    const __mmask16 m = Mask16(Dv, i);
    _mm256_mask_storeu_epi16(v + i, m,
                             RoundBf16(_mm512_add_ps(_mm512_maskz_loadu_ps(m, row + 2 * Dv + i),
                                                     _mm512_maskz_loadu_ps(m, b + 2 * Dv + i))));
  }
}

}  // namespace vls::vision_internal
