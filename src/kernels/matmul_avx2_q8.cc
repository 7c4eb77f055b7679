// Placeholder: the avx2 entries of this file are not written yet (the reference's run).
#include "kernels/avx2_internal.h"

namespace vls::kernels::avx2_internal {
void AddQ8Kernels(KernelVariant* /*v*/) {}
}  // namespace vls::kernels::avx2_internal
