// The "Q8 blocked" 8-bit weight format and the matching dynamic activation quantization.
//
// Weights: int8 symmetric, [rows, cols] (PyTorch Linear layout). Each row is split into blocks
// of kQ8Block = 32 columns (the last block of a row is shorter when cols % kQ8Block != 0); each
// (row, block) has an F16 scale d = f16(max|w| / 127) (nearest; one F16 step up where that is 0
// for a nonzero block or leaves max|w| / d above 127.5, which happens only for F16-subnormal
// scales; at most 65504) and q = round_to_nearest_even(w / d) in [-127, 127] against that F16
// value (an all-zero block has d 0 and q 0). Stored interleaved for AVX512-VNNI: rows in groups
// of 16, q as [groups, ceil(cols/4), 16, 4] (one 64-byte vector holds 4 consecutive columns of
// 16 rows), scales as [groups, blocks, 16]. Padding (rows past `rows` in the last group, columns
// past `cols` in the last 4) holds 0. A block is 34 bytes per 32 weights, as llama.cpp's Q8_0
// (ADR 0032).
//
// Activations are quantized per call, per row and per the same column blocks, s8 symmetric with
// their own f32 scale, and each block's Σ qx is kept (AVX512-VNNI multiplies u8 by s8: the
// kernels flip the weights to u8 qw + 128 and take 128 · Σ qx back). The matmul computes,
// exactly in int32 per block and then in f32 in block order,
//   y[m, n] = Σ_b sx[m, b] · sw[n, b] · Σ_{k∈b} qx · qw.
//
// Why 32 columns (ADR 0007, addendum): like llama.cpp's Q8_0, which quantizes weights and
// activations in blocks of 32. With 128-column blocks one outlier coarsened the step of 127
// neighbours, and the output distribution moved 1.4x as far as Q8_0's on the same weights; the
// format (block size 128) was changed, so prepared artifacts name their Q8 storage with the
// block size and the scale type ("Q8B32H") and refuse the older "Q8" (128 columns) and "Q8B32"
// (f32 scales and i32 weight sums, 40 bytes per 32 weights) entries.
#ifndef VLSTACK_KERNELS_QUANT_H_
#define VLSTACK_KERNELS_QUANT_H_

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace vls::kernels {

inline constexpr int64_t kQ8Block = 32;
inline constexpr int64_t kQ8Group = 16;  // weight rows interleaved together
constexpr int64_t Q8Blocks(int64_t cols) { return (cols + kQ8Block - 1) / kQ8Block; }
constexpr int64_t Q8Groups(int64_t rows) { return (rows + kQ8Group - 1) / kQ8Group; }
constexpr int64_t Q8Steps(int64_t cols) { return (cols + 3) / 4; }  // 4-column steps

// Where weight (r, k) lies in q, and (r, block b) in scales, for a matrix of `cols`.
constexpr int64_t Q8WeightIndex(int64_t cols, int64_t r, int64_t k) {
  return ((r / kQ8Group * Q8Steps(cols) + k / 4) * kQ8Group + r % kQ8Group) * 4 + k % 4;
}
constexpr int64_t Q8BlockIndex(int64_t cols, int64_t r, int64_t b) {
  return (r / kQ8Group * Q8Blocks(cols) + b) * kQ8Group + r % kQ8Group;
}

// Where the parts of one Q8 matrix lie in its buffer: byte offsets from the buffer start, each
// a multiple of 64, so a buffer written to disk and mapped back at any 64-byte-aligned address
// describes the same matrix.
struct Q8Layout {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t blocks = 0;         // Q8Blocks(cols)
  int64_t groups = 0;         // Q8Groups(rows)
  int64_t steps = 0;          // Q8Steps(cols)
  int64_t q_offset = 0;       // int8 [groups, steps, 16, 4]
  int64_t scales_offset = 0;  // F16 [groups, blocks, 16]
  int64_t bytes = 0;          // the whole buffer, a multiple of 64
};
Q8Layout Q8LayoutFor(int64_t rows, int64_t cols);

// The Matrix (format kQ8) stored at `base`. REQUIRES: base holds Q8LayoutFor(rows, cols).bytes
// bytes, 64-byte aligned (alignment is for speed; the kernels accept any address).
Matrix Q8MatrixAt(const void* base, int64_t rows, int64_t cols);

// Quantizes rows [r0, r1) of `src` (a dense F32/BF16/F16 matrix) into the Q8 buffer `dst`
// laid out as Q8LayoutFor(src.rows, src.cols). Disjoint row ranges may run concurrently.
// REQUIRES: src finite.
void QuantizeQ8(const Matrix& src, int64_t r0, int64_t r1, void* dst);
// The same into rows [dst_row + r0, dst_row + r1) of a buffer laid out as
// Q8LayoutFor(dst_rows, src.cols), for stacked matrices (QKV, gate/up) quantized part by part;
// the result equals quantizing the stacked matrix (rows are quantized independently). Each call
// writes only the bytes of its rows (and, with the last row, the padding rows), so disjoint row
// ranges may run concurrently even within one 16-row group.
// REQUIRES: dst_row + src.rows <= dst_rows.
void QuantizeQ8(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row);

// Activations quantized for a Q8 matmul, row-major. Buffers are reused across calls.
struct Q8Activations {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t blocks = 0;
  // [rows, cols]: qx, then kQ8ActivationSlack bytes, so a kernel may read the 4 bytes of a
  // column step that ends past the last column (the weights there are 0).
  std::vector<int8_t> q;
  std::vector<float> scales;  // [rows, blocks]
  // [rows, blocks]: −kQ8WeightFlip · Σ qx of the block, exact: where a kernel multiplies the
  // weights flipped to u8 (qw + kQ8WeightFlip, for vpdpbusd), the int32 sums of a block start
  // here, so the block's exact dot product is complete after its steps (ADR 0032).
  std::vector<int32_t> zero_terms;

  // Sizes the buffers for [rows, cols].
  void Resize(int64_t rows, int64_t cols);
};
inline constexpr int64_t kQ8ActivationSlack = 64;
inline constexpr int32_t kQ8WeightFlip = 128;

// Activation blocks whose max|x| is below this quantize as zeros with scale 0, like an all-zero
// block: below about 3.7e-37, 127 / amax overflows f32 (the values are far below anything a
// layer's output can resolve next to O(1) activations).
inline constexpr float kQ8MinActivationAmax = 0x1p-120f;

// The reference activation quantizer: rows [r0, r1) of x[a->rows, a->cols] into a->q,
// a->scales and a->zero_terms. Per block: amax = max|x|; when amax >= kQ8MinActivationAmax,
// scale = amax / 127 and q = clamp(nearbyint(x · (127 / amax)), ±127), else scale = 0 and q =
// 0; zero_terms = −kQ8WeightFlip · Σ q (every variant computes exactly these f32 operations).
// REQUIRES: x finite.
void QuantizeActivationsQ8(const float* x, int64_t r0, int64_t r1, Q8Activations* a);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_QUANT_H_
