// The "Q8 blocked" 8-bit weight format and the matching dynamic activation quantization.
//
// Weights: int8 symmetric, row-major [rows, cols] (PyTorch Linear layout). Each row is split into
// blocks of kQ8Block columns (the last block of a row is shorter when cols % kQ8Block != 0); each
// (row, block) has scale = max|w| / 127 and q = round_to_nearest_even(w / scale) in [-127, 127]
// (an all-zero block has scale 0 and q 0), plus Σq of the block as int32.
//
// Activations are quantized per call, per row and per the same column blocks, s8 symmetric with
// their own scale, and stored offset by +128 as u8 (AVX512-VNNI multiplies u8 by s8). The matmul
// computes, exactly in int32 per block and then in f32 in block order,
//   y[m, n] = Σ_b sx[m, b] · sw[n, b] · (Σ_{k∈b} (qx + 128) · qw − 128 · Σ_{k∈b} qw).
#ifndef VLSTACK_KERNELS_QUANT_H_
#define VLSTACK_KERNELS_QUANT_H_

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace vls::kernels {

inline constexpr int64_t kQ8Block = 128;
constexpr int64_t Q8Blocks(int64_t cols) { return (cols + kQ8Block - 1) / kQ8Block; }

// Where the parts of one Q8 matrix lie in its buffer: byte offsets from the buffer start, each
// a multiple of 64, so a buffer written to disk and mapped back at any 64-byte-aligned address
// describes the same matrix.
struct Q8Layout {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t blocks = 0;         // Q8Blocks(cols)
  int64_t q_offset = 0;       // int8 [rows, cols]
  int64_t scales_offset = 0;  // f32 [rows, blocks]
  int64_t sums_offset = 0;    // i32 [rows, blocks]
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
// the result equals quantizing the stacked matrix (rows are quantized independently).
// REQUIRES: dst_row + src.rows <= dst_rows.
void QuantizeQ8(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row);

// Activations quantized for a Q8 matmul, in two layouts: row-major (small M kernels) and
// interleaved by 16 rows × 4 columns (the VNNI panel kernel broadcasts 4 weight bytes against
// 16 rows). Buffers are reused across calls.
struct Q8Activations {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t blocks = 0;
  std::vector<uint8_t> q;       // [rows, cols]: qx + 128
  std::vector<float> scales;    // [rows, blocks]
  std::vector<uint8_t> q16;     // [ceil(rows/16), ceil(cols/4), 16, 4]; 0 past rows and cols
  std::vector<float> scales16;  // [ceil(rows/16), blocks, 16]; 0 past rows

  // Sizes the buffers for [rows, cols] and zeroes the interleaved ones.
  void Resize(int64_t rows, int64_t cols);
};

// The reference activation quantizer: rows [r0, r1) of x[a->rows, a->cols] into a->q and
// a->scales. Per block: amax = max|x|, scale = amax / 127, q = clamp(nearbyint(x · (127 /
// amax)), ±127) (every variant computes exactly these f32 operations). REQUIRES: x finite.
void QuantizeActivationsQ8(const float* x, int64_t r0, int64_t r1, Q8Activations* a);

// Copies rows [r0, r1) of a->q / a->scales into a->q16 / a->scales16. Ranges that do not share a
// 16-row group may run concurrently.
void InterleaveQ8Activations(int64_t r0, int64_t r1, Q8Activations* a);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_QUANT_H_
