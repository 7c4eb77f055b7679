// Non-x86-64 builds: no AVX2, AVX-512 or AMX kernels; the reference runs everywhere.
#include "kernels/amx.h"
#include "kernels/dispatch.h"
#include "kernels/q4.h"

namespace vls::kernels {
const KernelVariant* Avx2Variant() { return nullptr; }
const KernelVariant* Avx512Variant() { return nullptr; }
const KernelVariant* Avx512VnniVariant() { return nullptr; }
const KernelVariant* Avx512Bf16Variant() { return nullptr; }
const KernelVariant* Avx512Bf16FmaVariant() { return nullptr; }
const Q4Kernels* Avx512VnniQ4Kernels() { return nullptr; }
bool AmxAvailable() { return false; }
bool AmxQ8Applies(const Q8Activations&) { return false; }
void MatMulQ8Amx(const Q8Activations&, const Matrix&, int64_t, int64_t, float*) {}  // unreachable
void UseAmxTiles(KernelVariant*) {}
bool UsesAmxTiles(const KernelVariant&) { return false; }
}  // namespace vls::kernels
