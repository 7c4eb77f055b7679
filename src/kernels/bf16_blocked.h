// The "BF16 blocked" weight format: BF16 weights laid out for the broadcast form of the
// matmul, the layout oneDNN's BF16 matmul itself prefers on AVX512-BF16 CPUs (its format tag
// BA16a64b2a, for the weights seen as [K, N]).
//
// Output rows (n) are grouped in blocks of kBf16BlockN = 64 and the input columns (k) in blocks
// of kBf16BlockK = 32; rows and columns are zero-padded to whole blocks. Within a (n-block,
// k-block) tile of 2048 values, pairs of adjacent columns are interleaved per row:
//   value(n, k) at  (n / 64) · Kp · 64  +  (k / 32) · 2048  +  (k % 32 / 2) · 128
//                   +  (n % 64) · 2  +  k % 2,           Kp = cols rounded up to 32,
// so one column pair of 64 rows is 256 contiguous bytes (four 512-bit vectors of 16 rows ×
// 2 columns, the operands of vdpbf16ps against a broadcast activation pair). A matmul needs
// no horizontal sums: each vector accumulates 16 outputs. oneDNN reads the same buffer in
// place (onednn_matmul.h), so prefill and decode share one copy of the weights.
#ifndef VLSTACK_KERNELS_BF16_BLOCKED_H_
#define VLSTACK_KERNELS_BF16_BLOCKED_H_

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace vls::kernels {

inline constexpr int64_t kBf16BlockN = 64;
inline constexpr int64_t kBf16BlockK = 32;

constexpr int64_t Bf16PaddedRows(int64_t rows) {
  return (rows + kBf16BlockN - 1) / kBf16BlockN * kBf16BlockN;
}
constexpr int64_t Bf16PaddedCols(int64_t cols) {
  return (cols + kBf16BlockK - 1) / kBf16BlockK * kBf16BlockK;
}
// Bytes of a [rows, cols] matrix in the blocked format (padding included).
constexpr int64_t Bf16BlockedBytes(int64_t rows, int64_t cols) {
  return Bf16PaddedRows(rows) * Bf16PaddedCols(cols) * 2;
}
// Index (in BF16 values) of (n, k) in a blocked buffer whose padded column count is kp.
constexpr int64_t Bf16BlockedIndex(int64_t n, int64_t k, int64_t kp) {
  return (n / kBf16BlockN) * kp * kBf16BlockN + (k / kBf16BlockK) * (kBf16BlockN * kBf16BlockK) +
         (k % kBf16BlockK / 2) * (2 * kBf16BlockN) + (n % kBf16BlockN) * 2 + k % 2;
}

// The Matrix (format kBf16Blocked, dtype kBF16) stored at `base`.
// REQUIRES: base holds Bf16BlockedBytes(rows, cols) bytes (64-byte alignment is for speed).
Matrix Bf16BlockedMatrixAt(const void* base, int64_t rows, int64_t cols);

// Writes rows [r0, r1) of `src` (a dense F32/BF16/F16 matrix), rounded to BF16 (nearest even),
// as rows [dst_row + r0, dst_row + r1) of the blocked buffer `dst` of a [dst_rows, src.cols]
// matrix (dst_row places one part of a stacked matrix such as QKV). Padding values are not
// written: `dst` must start zeroed (an anonymous mapping does). Disjoint row ranges may run
// concurrently. REQUIRES: dst_row + src.rows <= dst_rows.
void PackBf16Blocked(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                     int64_t dst_row);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_BF16_BLOCKED_H_
