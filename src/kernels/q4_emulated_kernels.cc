// matmul_avx512_q4.cc with scalar stand-ins for its intrinsics (kernels/avx512_emulation.h),
// built into q4_test only, so its tiling and epilogue run on CPUs without AVX-512 too.
#define VLS_AVX512_EMULATION 1
#include "kernels/matmul_avx512_q4.cc"  // NOLINT(bugprone-suspicious-include)
