// AVX-512 loops of the vision tower's fast path (vision_ops.h), compiled with AVX-512 flags
// (tower.cmake) and called only when the context's kernel variant is an AVX-512 one, which
// dispatch.cc picks only on CPUs that have it.
#include <immintrin.h>

#include <cstdint>

#include "kernels/avx512_math.h"
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
