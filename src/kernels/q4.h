// The "Q4 blocked" 4-bit weight format (--precision int4, ADR 0019) and its dynamic activation
// quantization.
//
// Weights: [rows, cols] (PyTorch Linear layout), cols a multiple of kQ4Group. Each row is split
// into groups of kQ4Group = 32 columns; each (row, group) holds an asymmetric affine code
// w ≈ d · q + m with q in [0, 15] and d, m stored as F16. The quantizer picks (d, m) by a small
// search minimising the importance-weighted squared error (ggml's make_qkx2 search with Q4_K's
// weights |x| + rms(x)), rounds them to F16 and then rounds every q against the F16 values.
//
// Storage, for AVX512-VNNI: rows in groups of kQ4Rows = 16; one block per (row group, column
// group) of kQ4BlockBytes = 320 bytes, blocks ordered [row groups, column groups]:
//   bytes [0, 256):   4 vectors of 64 bytes; vector j holds, for row r of the group at bytes
//                     4r .. 4r+3, the codes of columns 4j .. 4j+3 of the group in the low
//                     nibbles and of columns 16+4j .. 16+4j+3 in the high nibbles;
//   bytes [256, 288): d of the 16 rows (F16);  bytes [288, 320): m of the 16 rows (F16).
// So one 64-byte load and two masks give the u8 operands of two vpdpbusd, each adding 4 columns
// to 16 rows, and the scales of 16 rows load as one vector. Padding rows hold zeros.
//
// Activations are quantized per call, per row and per group of 32 columns, s8 symmetric with
// their own scale s = amax / 127 (as the Q8 activations, kernels/quant.h), and each group's
// Σ qx is kept. The matmul computes, exactly in int32 per group and then in f32 in group order,
//   y[m, n] = Σ_g s[m, g] · (d[n, g] · Σ_{k∈g} qx · q + m[n, g] · Σ_{k∈g} qx).
#ifndef VLSTACK_KERNELS_Q4_H_
#define VLSTACK_KERNELS_Q4_H_

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace vls::kernels {

struct KernelVariant;  // kernels/dispatch.h

inline constexpr int64_t kQ4Group = 32;        // columns per (d, m)
inline constexpr int64_t kQ4Rows = 16;         // weight rows interleaved together
inline constexpr int64_t kQ4BlockBytes = 320;  // one 16-row × 32-column block
inline constexpr int64_t kQ4ScalesOffset = 256;
inline constexpr int64_t kQ4MinsOffset = 288;

constexpr int64_t Q4Groups(int64_t cols) { return cols / kQ4Group; }
constexpr int64_t Q4RowGroups(int64_t rows) { return (rows + kQ4Rows - 1) / kQ4Rows; }
// Whether a [rows, cols] matrix can be stored as Q4 (otherwise the loader keeps it at Q8).
constexpr bool Q4Supports(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && cols % kQ4Group == 0;
}
// The bytes of a Q4 matrix, a multiple of 64.
constexpr int64_t Q4Bytes(int64_t rows, int64_t cols) {
  return Q4RowGroups(rows) * Q4Groups(cols) * kQ4BlockBytes;
}
// The block holding row r, column k; and the byte of (r, k) in it (the high nibble when
// k % 32 >= 16).
constexpr int64_t Q4BlockOffset(int64_t cols, int64_t r, int64_t k) {
  return (r / kQ4Rows * Q4Groups(cols) + k / kQ4Group) * kQ4BlockBytes;
}
constexpr int64_t Q4CodeOffset(int64_t r, int64_t k) {
  return (k % 16) / 4 * 64 + (r % kQ4Rows) * 4 + k % 4;
}

// The Matrix (format kQ4) stored at `base`. REQUIRES: Q4Supports(rows, cols); base holds
// Q4Bytes(rows, cols) bytes (64-byte alignment is for speed only).
Matrix Q4MatrixAt(const void* base, int64_t rows, int64_t cols);
// Code q, d and m of weight (r, k) of a kQ4 matrix.
int Q4Code(const Matrix& w, int64_t r, int64_t k);
float Q4Scale(const Matrix& w, int64_t r, int64_t group);
float Q4Min(const Matrix& w, int64_t r, int64_t group);

// Quantizes rows [r0, r1) of `src` (dense F32/BF16/F16, finite) into rows [dst_row + r0,
// dst_row + r1) of the Q4 buffer `dst` of dst_rows rows (stacked matrices quantized part by
// part; rows are independent). Each call writes only its rows' bytes (and, with the last row,
// the padding rows), so disjoint row ranges may run concurrently.
// REQUIRES: Q4Supports(dst_rows, src.cols), dst_row + src.rows <= dst_rows.
void QuantizeQ4(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row);
// The (d, m) and codes of one group of kQ4Group values (the quantizer's core, for tests).
void QuantizeQ4Group(const float* x, uint16_t* d, uint16_t* m, uint8_t* q);

// The quantizer's core over n groups at once: group j's kQ4Group values at x[j] give d[j], m[j]
// and the codes q[j·kQ4Group, (j+1)·kQ4Group), bit for bit as QuantizeQ4Group gives them. The
// SIMD ones run one group per lane (q4_quantize_impl.h), the scalar operations in their order.
struct Q4Quantizer {
  const char* name = nullptr;
  void (*groups)(const float* const* x, int64_t n, uint16_t* d, uint16_t* m, uint8_t* q) = nullptr;
};
// "reference" (QuantizeQ4Group per group) first, then "avx2" and "avx512" where the build and
// the CPU have them.
std::vector<const Q4Quantizer*> SupportedQ4Quantizers();
// The last of those, or the one named by the environment variable VLS_Q4_QUANTIZER (A/B timing;
// every one gives the same bytes): the one QuantizeQ4 runs.
const Q4Quantizer& DefaultQ4Quantizer();
// QuantizeQ4 with the given quantizer (tests, benchmarks); the same bytes for every one.
void QuantizeQ4With(const Q4Quantizer& quantizer, const Matrix& src, int64_t r0, int64_t r1,
                    void* dst, int64_t dst_rows, int64_t dst_row);

// Activations quantized for a Q4 matmul: views into one buffer (Q4ActivationsAt).
struct Q4Activations {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t groups = 0;
  int8_t* q = nullptr;      // [rows, cols]
  float* scales = nullptr;  // [rows, groups]: s = amax / 127 (0 for a zero group)
  float* sums = nullptr;    // [rows, groups]: Σ qx of the group, exact
};
// The bytes Q4ActivationsAt needs for [rows, cols]; the views into `buf` (64-byte aligned parts
// when buf is). REQUIRES: cols % kQ4Group == 0.
int64_t Q4ActivationBytes(int64_t rows, int64_t cols);
Q4Activations Q4ActivationsAt(void* buf, int64_t rows, int64_t cols);

// The reference activation quantizer: rows [r0, r1) of x[a.rows, a.cols]. Per group, as
// QuantizeActivationsQ8 per block: amax = max|x|; when amax >= kQ8MinActivationAmax,
// s = amax / 127 and q = clamp(nearbyint(x · (127 / amax)), ±127), else s = 0 and q = 0; then
// sums = Σ q. REQUIRES: x finite.
void QuantizeActivationsQ4(const float* x, int64_t r0, int64_t r1, const Q4Activations& a);

// The reference product y[m, n0:n1] (row stride w.rows) of quantized x and a kQ4 matrix: per
// group dot = Σ qx · q in int32, then t = f32(dot) · d, t = fma(m, sums, t), acc = fma(t, s, acc)
// in group order; the optimised kernels do the same f32 operations per (m, n).
void RefMatMulQ4(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y);

// One implementation of the Q4 entries (as KernelVariant's, kernels/dispatch.h).
struct Q4Kernels {
  const char* name = nullptr;
  void (*quantize)(const float* x, int64_t r0, int64_t r1, const Q4Activations& a) = nullptr;
  void (*matmul)(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                 float* y) = nullptr;
  // The same for a kQ6 matrix (kernels/q6.h), with RefMatMulQ6's results. Null: that.
  void (*matmul_q6)(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                    float* y) = nullptr;
};
const Q4Kernels& ReferenceQ4Kernels();
// The AVX512-VNNI kernels (matmul_avx512_q4.cc); null when the build has no AVX-512.
const Q4Kernels* Avx512VnniQ4Kernels();
// The Q4 kernels a variant runs: its own (KernelVariant::q4: the AVX512-VNNI ones for
// "avx512vnni" and "avx512bf16", the AVX2 ones for "avx2"), else the reference.
const Q4Kernels& Q4KernelsFor(const KernelVariant& v);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_Q4_H_
