// An Intel AMX tile kernel for the Q8 products of many rows (prefill: each expert's ~32 rows of
// a prompt, the dense projections of a chunk). ADR 0034.
//
// AMX-INT8 multiplies a tile of 16 activation rows × 64 bytes by a tile of 16 × 64 weight bytes
// laid out as AVX512-VNNI lays them (4 columns of 16 weight rows per 64 bytes, as the Q8 format
// stores them), into 16 × 16 int32 sums, in one instruction. The format's 32-column blocks give
// every block its own scales, so each block's tile of sums is stored and combined in f32 by
// AVX-512 (the same operations in the same order as the reference); that store and epilogue,
// not the multiplication, is the kernel's cost. Every result equals the reference bit for bit,
// as the VNNI kernels' do. The Q4 products stay on AVX512-VNNI: with their codes unpacked to
// the same layout and their longer epilogue, tiles were slower (ADR 0034).
//
// Thread safety: the kernel configures the calling thread's tiles on entry and releases them on
// return; any thread may call it concurrently on disjoint outputs.
#ifndef VLSTACK_KERNELS_AMX_H_
#define VLSTACK_KERNELS_AMX_H_

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/quant.h"

namespace vls::kernels {

// Whether the tile kernels run here: the CPU reports AMX-TILE and AMX-INT8, the kernel has
// given this process the tile state (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM), asked for here),
// and the environment variable VLS_AMX is not "0" (A/B timing). Decided once per process.
bool AmxAvailable();

// Products of at least this many rows take the tile kernel (AmxQ8Applies). A tile holds up to
// 16 activation rows; below 8 rows the AVX512-VNNI kernels were as fast (ADR 0034).
inline constexpr int64_t kAmxMinRows = 8;

// Whether MatMulQ8Amx computes the product of x here: AmxAvailable(), enough rows, and whole
// 32-column blocks.
bool AmxQ8Applies(const Q8Activations& x);

// As KernelVariant::matmul_q8: y[m, n0:n1] (row stride w.rows), with the reference variant's
// results bit for bit. REQUIRES: AmxQ8Applies(x).
void MatMulQ8Amx(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y);

struct KernelVariant;  // kernels/dispatch.h
// Where AmxAvailable(): v's Q8 products (matmul_q8, matmul_q8_four_streams) take the tile
// kernel when it applies and the AVX512-VNNI kernels otherwise. Elsewhere v is left as it is.
// For the AVX512-BF16 variants (every CPU with AMX has AVX512-BF16 and AVX512-VNNI).
void UseAmxTiles(KernelVariant* v);
// Whether v's Q8 products were put on the tiles by UseAmxTiles.
bool UsesAmxTiles(const KernelVariant& v);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_AMX_H_
