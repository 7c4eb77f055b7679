// Vector math shared by the AVX-512 kernel files. Include only from files compiled with the
// AVX-512 flags (kernels/CMakeLists.txt); everything here is inline.
#ifndef VLSTACK_KERNELS_AVX512_MATH_H_
#define VLSTACK_KERNELS_AVX512_MATH_H_

#include <immintrin.h>

namespace vls::kernels::avx512_internal {

// exp(x) to about 1 ulp (Cephes expf: x = n·ln2 + r, exp(r) = 1 + r + r²·P(r)); lanes below
// -87 (under FLT_MIN, including -inf for masked keys) give 0.
inline __m512 Exp(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(ok, _mm512_scalef_ps(e, n));
}

}  // namespace vls::kernels::avx512_internal

#endif  // VLSTACK_KERNELS_AVX512_MATH_H_
