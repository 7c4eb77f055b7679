// Non-x86-64 builds: no AVX2 or AVX-512 variants; the reference runs everywhere.
#include "kernels/dispatch.h"
#include "kernels/q4.h"

namespace vls::kernels {
const KernelVariant* Avx2Variant() { return nullptr; }
const KernelVariant* Avx512Variant() { return nullptr; }
const KernelVariant* Avx512VnniVariant() { return nullptr; }
const KernelVariant* Avx512Bf16Variant() { return nullptr; }
const KernelVariant* Avx512Bf16FmaVariant() { return nullptr; }
const Q4Kernels* Avx512VnniQ4Kernels() { return nullptr; }
}  // namespace vls::kernels
