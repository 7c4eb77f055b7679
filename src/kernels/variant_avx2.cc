// The "avx2" variant, assembled from the entries its files fill in (kernels/avx2_internal.h).
// Compiled without -m flags: it only takes the functions' addresses.
#include "kernels/avx2_internal.h"

namespace vls::kernels {

const KernelVariant* Avx2Variant() {
  static const KernelVariant v = [] {
    KernelVariant k = ReferenceVariant();
    k.name = "avx2";
    avx2_internal::AddMatMulKernels(&k);
    avx2_internal::AddQ8Kernels(&k);
    avx2_internal::AddAttentionKernels(&k);
    avx2_internal::AddElementwiseKernels(&k);
    k.q4 = avx2_internal::Q4KernelsAvx2();
    return k;
  }();
  return &v;
}

}  // namespace vls::kernels
