// The kernels layer: the numeric ops a model runs. This file holds the Matrix view every op
// takes and the plain scalar reference of each op; every optimised kernel is tested against
// these. The rest of the folder:
//
//   dispatch.h          KernelVariant, a table of entry points per instruction set
//                       ("reference", "avx2", "avx512", "avx512vnni", "avx512bf16"; the fastest
//                       the CPU runs is chosen once, or the one VLS_KERNELS names), and
//                       Context: the thread pool, precision, variant and per-thread scratch
//                       arenas a model runs with.
//                       Context::MatMul routes each product by weight format, precision and
//                       row count.
//   matmul_avx512_*.cc  AVX-512 matmuls: f32 activations with F32/BF16/F16 weights widened in
//                       registers, dense BF16 and BF16 blocked (AVX512-BF16, and an AVX-512F
//                       fallback for blocked), Q8 (AVX512-VNNI); matmul_tiles.h is their shared
//                       register blocking.
//   attention*.{h,cc}   blocked online-softmax attention over one GQA group (AVX-512).
//   elementwise_avx512  RMSNorm, SiLU·up, RoPE and BF16 rounding; avx512_math.h their exp.
//   quant.h             the Q8 weight format and the per-call activation quantizer.
//   q4.h                the Q4 (4-bit) weight format, its activation quantizer and reference;
//                       matmul_avx512_q4.cc its AVX512-VNNI kernels (ADR 0019).
//   bf16_blocked.h      the BF16 blocked weight format (oneDNN's own layout, read in place).
//   onednn_matmul.h     prefill GEMMs through oneDNN (optional at build time).
//   scratch.h           the per-thread scratch arenas a Context owns.
//   *_avx2.cc           the "avx2" variant (AVX2 + FMA + F16C) for CPUs without AVX-512: the
//                       same entries on 256-bit vectors; avx2_internal.h lists its files.
//
// The AVX2 and AVX-512 files are compiled with their own -m flags and called only after the CPU
// check in dispatch.cc (no_avx512.cc stands in for them elsewhere), so the rest of the binary
// stays baseline x86-64.
//
// Activations are f32 row-major. Weights are PyTorch Linear layout [out, in] and may stay in
// their stored dtype (F32, BF16, F16) or be prepared as Q8 or BF16 blocked (MatrixFormat);
// every product accumulates in f32.
#ifndef VLSTACK_KERNELS_KERNELS_H_
#define VLSTACK_KERNELS_KERNELS_H_

#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace vls::kernels {

// How a Matrix's values are stored.
enum class MatrixFormat : uint8_t {
  kDense,  // `data` holds rows·cols values of `dtype`, row-major
  // Q8 blocked (kernels/quant.h): `data` holds int8 q interleaved as [row groups of 16,
  // column groups of 4, 16, 4]; `scales` (F16) hold [row groups, Q8Blocks(cols), 16]
  // (Q8WeightIndex / Q8BlockIndex); value = q · scale of its (row, block). `dtype` is ignored.
  kQ8,
  // BF16 blocked (kernels/bf16_blocked.h): `data` holds BF16 values in 64-row × 32-column
  // tiles, column pairs interleaved per row, zero-padded to whole tiles. `dtype` is kBF16.
  kBf16Blocked,
  // Q4 blocked (kernels/q4.h): `data` holds 320-byte blocks of 16 rows × 32 columns, 4-bit
  // codes with an F16 scale and min per (row, 32 columns); value = d · q + m. `dtype` is
  // ignored.
  kQ4,
  // Q6 blocked (kernels/q6.h): `data` holds 384-byte code blocks of 16 rows × 32 columns, then
  // an F16 scale per (row, 32 columns); value = d · (u − 32). `dtype` is ignored.
  kQ6,
};

// A read-only [rows, cols] matrix in a float dtype, or quantized (format kQ8).
struct Matrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  MatrixFormat format = MatrixFormat::kDense;
  const uint16_t* scales = nullptr;  // kQ8 only: F16 per (row, block)
};

// Copies row `r` of `m` into `out[cols]` as f32 (dequantized for kQ8).
void LoadRow(const Matrix& m, int64_t r, float* out);

// y[M, N] = x[M, K] · w[N, K]ᵀ. REQUIRES: w.cols == K.
void MatMulTransposed(const float* x, int64_t M, int64_t K, const Matrix& w, float* y);

// out[M, n] = x / sqrt(mean(x², -1) + eps) * weight, per row of n; `out` may alias `x`.
void RmsNorm(const float* x, int64_t M, int64_t n, const float* weight, float eps, float* out);

// gate[i] = SiLU(gate[i]) * up[i] for n values.
void SiluMul(float* gate, const float* up, int64_t n);

// out[i] = Σ_j w[j] · rows[j][i] for n values: from 0, one fused multiply-add per j in
// ascending order (a mixture-of-experts row from its k expert outputs). Every variant's
// weighted_rows gives these values bit for bit. `out` may not alias a row.
void WeightedRows(const float* w, const float* const* rows, int64_t k, int64_t n, float* out);

// Rotates one head vector x[D] in place (NeoX rotate_half convention): for i < D/2,
// (x[i], x[i+D/2]) rotates by the angle whose cos/sin are given per slot i.
void ApplyRope(float* x, const float* cos, const float* sin, int64_t D);

// out[n] = F32ToBf16(x[n]) (round to nearest even, NaN stays NaN) bit for bit, with the
// default kernel variant's vector code when it has one (kernels/dispatch.h).
void ToBf16(const float* x, int64_t n, uint16_t* out);

// Numerically stable softmax of x[n] in place.
void Softmax(float* x, int64_t n);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_KERNELS_H_
