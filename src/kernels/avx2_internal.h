// The "avx2" kernel variant (AVX2 + FMA + F16C: Haswell and later Intel, AMD Zen 1-3), for
// CPUs without AVX-512. Each file below is compiled with those -m flags and fills the entries it
// implements into a copy of the reference variant (variant_avx2.cc); entries a file leaves alone
// stay the reference's. dispatch.cc offers the variant only after checking the CPU.
#ifndef VLSTACK_KERNELS_AVX2_INTERNAL_H_
#define VLSTACK_KERNELS_AVX2_INTERNAL_H_

#include "kernels/dispatch.h"
#include "kernels/q4.h"

namespace vls::kernels::avx2_internal {

// matmul_avx2_f32.cc: matmul_f32, matmul_bf16, matmul_bf16_blocked.
void AddMatMulKernels(KernelVariant* v);
// matmul_avx2_q8.cc: quantize_q8, matmul_q8 (bit for bit the reference's results).
void AddQ8Kernels(KernelVariant* v);
// matmul_avx2_q4.cc: the Q4 entries (bit for bit the reference's results).
const Q4Kernels* Q4KernelsAvx2();
// matmul_avx2_q6.cc: Q4Kernels::matmul_q6 (bit for bit RefMatMulQ6's results).
void MatMulQ6Avx2(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y);
// attention_avx2.cc: attention, scores, weighted_sum.
void AddAttentionKernels(KernelVariant* v);
// elementwise_avx2.cc: rms_norm, silu_mul, to_bf16, apply_rope.
void AddElementwiseKernels(KernelVariant* v);

}  // namespace vls::kernels::avx2_internal

#endif  // VLSTACK_KERNELS_AVX2_INTERNAL_H_
