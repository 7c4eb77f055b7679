// Placeholder: the avx2 Q4 kernels are not written yet (the reference's run).
#include "kernels/avx2_internal.h"

namespace vls::kernels::avx2_internal {
const Q4Kernels* Q4KernelsAvx2() { return nullptr; }
}  // namespace vls::kernels::avx2_internal
