// The "Q6 blocked" 6-bit weight format: the LM head under --precision int4 (ADR 0021). It takes
// the Q4 activations (kernels/q4.h: s8 per row and 32 columns, with the group's scale and Σqx)
// and runs through the Q4 kernel table (Q4Kernels::matmul_q6).
//
// Weights: [rows, cols] (PyTorch Linear layout), cols a multiple of kQ6Group = 32. Each
// (row, group of 32 columns) is coded symmetrically, w ≈ d · q with q in [-31, 31] and d stored
// as F16: 6.5 bits per weight (llama.cpp's Q6_K, its LM head under Q4_0 and Q4_K_M, is 6.5625).
// The code is stored as u = q + 32 in [1, 63]. The quantizer searches d for the least squared
// error of the group, rounds it to F16 and codes every value again against the rounded d.
//
// Storage, for AVX512-VNNI: rows in groups of kQ6Rows = 16, G = cols / 32 column groups.
//   codes:  one block of kQ6CodeBytes = 384 bytes per (row group, column group), ordered
//           [row groups, column groups], at kQ6CodeBytes · (rg · G + g):
//           bytes [0, 256):   the low 4 bits of u, laid out as the Q4 codes (q4.h): 4 vectors
//                             of 64 bytes; vector j holds, for row r at bytes 4r .. 4r+3,
//                             columns 4j .. 4j+3 in the low nibbles and 16+4j .. 16+4j+3 in
//                             the high nibbles;
//           bytes [256, 384): the high 2 bits of u: vector h (h = 0, 1) holds at byte 4r + c,
//                             bits 2i .. 2i+1, those of column 16h + 4i + c of row r.
//   scales: after all codes (at kQ6CodeBytes · RG · G), d of (row group, column group) as 16
//           F16 values (one per row), ordered [row groups, column groups, 16].
// So one 64-byte code load per 4 columns of 16 rows, both streams sequential. Padding rows hold
// zero codes and d = 0.
//
// The matmul computes, exactly in int32 per group and then in f32 in group order,
//   y[m, n] = Σ_g s[m, g] · d[n, g] · (Σ_{k∈g} qx · u − 32 · Σ_{k∈g} qx).
#ifndef VLSTACK_KERNELS_Q6_H_
#define VLSTACK_KERNELS_Q6_H_

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/q4.h"

namespace vls::kernels {

inline constexpr int64_t kQ6Group = 32;       // columns per d
inline constexpr int64_t kQ6Rows = 16;        // weight rows interleaved together
inline constexpr int64_t kQ6CodeBytes = 384;  // one 16-row × 32-column block of codes
inline constexpr int64_t kQ6HighOffset = 256;
inline constexpr int kQ6Zero = 32;  // u = q + kQ6Zero
inline constexpr int kQ6MaxCode = 31;

static_assert(kQ6Group == kQ4Group, "Q6 takes the Q4 activations");

constexpr int64_t Q6Groups(int64_t cols) { return cols / kQ6Group; }
constexpr int64_t Q6RowGroups(int64_t rows) { return (rows + kQ6Rows - 1) / kQ6Rows; }
// Whether a [rows, cols] matrix can be stored as Q6.
constexpr bool Q6Supports(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && cols % kQ6Group == 0;
}
// Where the scales start, and the bytes of a Q6 matrix (a multiple of 64).
constexpr int64_t Q6ScalesOffset(int64_t rows, int64_t cols) {
  return Q6RowGroups(rows) * Q6Groups(cols) * kQ6CodeBytes;
}
constexpr int64_t Q6Bytes(int64_t rows, int64_t cols) {
  return Q6ScalesOffset(rows, cols) + (Q6RowGroups(rows) * Q6Groups(cols) * 32 + 63) / 64 * 64;
}
// The code block holding (r, k); the byte of its low 4 bits (the high nibble when
// k % 32 >= 16) and of its high 2 bits (at bit 2 · ((k % 16) / 4)) in the block.
constexpr int64_t Q6BlockOffset(int64_t cols, int64_t r, int64_t k) {
  return (r / kQ6Rows * Q6Groups(cols) + k / kQ6Group) * kQ6CodeBytes;
}
constexpr int64_t Q6LowOffset(int64_t r, int64_t k) {
  return (k % 16) / 4 * 64 + (r % kQ6Rows) * 4 + k % 4;
}
constexpr int64_t Q6HighOffset(int64_t r, int64_t k) {
  return kQ6HighOffset + (k % 32) / 16 * 64 + (r % kQ6Rows) * 4 + k % 4;
}
// The byte offset of d of (r, group g).
constexpr int64_t Q6ScaleOffset(int64_t rows, int64_t cols, int64_t r, int64_t g) {
  return Q6ScalesOffset(rows, cols) +
         ((r / kQ6Rows * Q6Groups(cols) + g) * kQ6Rows + r % kQ6Rows) * 2;
}

// The Matrix (format kQ6) stored at `base`. REQUIRES: Q6Supports(rows, cols); base holds
// Q6Bytes(rows, cols) bytes (64-byte alignment is for speed only).
Matrix Q6MatrixAt(const void* base, int64_t rows, int64_t cols);
// Stored code u (q + 32) and d of weight (r, k) of a kQ6 matrix.
int Q6Code(const Matrix& w, int64_t r, int64_t k);
float Q6Scale(const Matrix& w, int64_t r, int64_t group);

// Quantizes rows [r0, r1) of `src` (dense F32/BF16/F16, finite) into rows [dst_row + r0,
// dst_row + r1) of the Q6 buffer `dst` of dst_rows rows, as QuantizeQ4 (each call writes only
// its rows' bytes, and with the last row the padding rows). REQUIRES: Q6Supports(dst_rows,
// src.cols), dst_row + src.rows <= dst_rows.
void QuantizeQ6(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row);
// d (F16) and the stored codes u of one group of kQ6Group values (the quantizer's core).
void QuantizeQ6Group(const float* x, uint16_t* d, uint8_t* u);

// The quantizer's core over n groups at once: group j's kQ6Group values at x[j] give d[j] and
// the stored codes u[j·kQ6Group, (j+1)·kQ6Group), bit for bit as QuantizeQ6Group gives them.
// The SIMD ones run one group per lane (q6_quantize_impl.h), the scalar operations in order.
struct Q6Quantizer {
  const char* name = nullptr;
  void (*groups)(const float* const* x, int64_t n, uint16_t* d, uint8_t* u) = nullptr;
};
// "reference" (QuantizeQ6Group per group) first, then "avx2" and "avx512" where the build and
// the CPU have them.
std::vector<const Q6Quantizer*> SupportedQ6Quantizers();
// The last of those, or the one named by the environment variable VLS_Q6_QUANTIZER (A/B timing;
// every one gives the same bytes): the one QuantizeQ6 runs.
const Q6Quantizer& DefaultQ6Quantizer();
// QuantizeQ6 with the given quantizer (tests, benchmarks); the same bytes for every one.
void QuantizeQ6With(const Q6Quantizer& quantizer, const Matrix& src, int64_t r0, int64_t r1,
                    void* dst, int64_t dst_rows, int64_t dst_row);

// The reference product y[m, n0:n1] (row stride w.rows) of quantized x (q4.h) and a kQ6
// matrix: per group dot = Σ qx · u − 32 · Σqx in int32, then t = f32(dot) · d,
// acc = fma(t, s, acc) in group order; the optimised kernels do the same f32 operations.
void RefMatMulQ6(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_Q6_H_
