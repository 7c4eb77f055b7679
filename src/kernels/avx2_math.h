// Vector math shared by the AVX2 kernel files. Include only from files compiled with the AVX2
// flags (kernels/CMakeLists.txt); everything here is inline.
#ifndef VLSTACK_KERNELS_AVX2_MATH_H_
#define VLSTACK_KERNELS_AVX2_MATH_H_

#include <immintrin.h>

#include <cstdint>

namespace vls::kernels::avx2_internal {

// All-ones in the lanes i < left of 8 (none for left <= 0, all for left >= 8): the mask of
// _mm256_maskload_ps / _mm256_maskstore_ps, which neither read nor fault past it.
inline __m256i TailMask8(int64_t left) {
  const int32_t n = left >= 8 ? 8 : left <= 0 ? 0 : static_cast<int32_t>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) as avx512_internal::Exp (Cephes expf: x = n·ln2 + r, exp(r) = 1 + r + r²·P(r)), to
// about 1 ulp and bit for bit that function's value wherever the result is finite: lanes below
// -87 (under FLT_MIN, including -inf for masked keys, and NaN) give 0, lanes above 89 +inf.
// AVX2 has no scalef: 2^n is built in the exponent field, in two halves so that n = 128
// (results between 2^127 and FLT_MAX) stays representable.
inline __m256 Exp(__m256 x) {
  // min_ps returns its second operand for a NaN lane: 89 there, zeroed by `ok` below.
  const __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n in [-126, 128] for the lanes kept: halves a = n >> 1 and b = n - a lie in [-63, 64], so
  // 2^a and 2^b are normal; e·2^a is exact and e·2^a·2^b rounds once, as scalef does.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i a = _mm256_srai_epi32(ni, 1);
  const __m256i b = _mm256_sub_epi32(ni, a);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 pa = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, bias), 23));
  const __m256 pb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, bias), 23));
  const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  return _mm256_and_ps(ok, _mm256_mul_ps(_mm256_mul_ps(e, pa), pb));
}

// The sum of the 8 lanes of v.
inline float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The sum of the 8 int32 lanes of v (wrapping).
inline int32_t ReduceAdd(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The largest of the 8 lanes of v.
inline float ReduceMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace vls::kernels::avx2_internal

#endif  // VLSTACK_KERNELS_AVX2_MATH_H_
