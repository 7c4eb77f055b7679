// The matmul on BF16 blocked weights of the "avx2" variant (matmul_avx2_bf16.cc), declared for
// AddMatMulKernels (matmul_avx2_f32.cc), which puts it in the table.
#ifndef VLSTACK_KERNELS_MATMUL_AVX2_BF16_H_
#define VLSTACK_KERNELS_MATMUL_AVX2_BF16_H_

#include <cstdint>

#include "kernels/kernels.h"

namespace vls::kernels::avx2_internal {

// KernelVariant::matmul_bf16_blocked. REQUIRES: n0 a multiple of kBf16BlockN; the CPU has
// AVX2 and FMA.
void MatMulBf16Blocked(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                       int64_t n1, float* y);

}  // namespace vls::kernels::avx2_internal

#endif  // VLSTACK_KERNELS_MATMUL_AVX2_BF16_H_
