// Block-scaled FP8 E4M3 Linear weights (config.json quant_method "fp8",
// model/quantization_config.h; docs/adr/0017-fp8-checkpoints.md).
//
// A quantized Linear layer `<m>` stores
//   <m>.weight            F8_E4M3 [out, in]
//   <m>.weight_scale_inv  F32, BF16 or F16 [ceil(out / bh), ceil(in / bw)]
// for weight_block_size [bh, bw], and its real weight is, in f32,
//   W[r][c] = e4m3(weight[r][c]) * scale_inv[r / bh][c / bw]
// ("inv" notwithstanding, the scale multiplies: it is the inverse of the quantizer's 448/amax,
// as in transformers' Fp8Dequantize, DeepSeek-V3's weight_dequant and vLLM's block-FP8
// matmul). The product is one f32 multiplication, as those references compute it: exact for a
// BF16 or F16 scale (at most 4 + 11 significant bits), rounded to nearest even for an F32 scale
// whose significand is longer, and for a product below 2^-126.
//
// The rule, per tensor, that says whether a Linear layer is quantized: its weight's dtype is
// F8_E4M3. Everything around that is checked, and each mismatch refused naming the tensor:
//   * an F8_E4M3 weight needs the config's quantization_config, a module the config does not
//     exclude (modules_to_not_convert / ignored_layers), and its weight_scale_inv tensor;
//   * a weight_scale_inv tensor needs an F8_E4M3 weight (a float weight beside it would have its
//     scales silently ignored);
//   * the scale tensor has a float dtype and exactly the shape above;
//   * every scale is finite, not negative, and small enough that 448 · scale is finite (DataLoss:
//     corrupt data). A zero scale is allowed: it makes its block zero, which is what a
//     quantizer writing amax/448 stores for an all-zero block. A negative scale would flip the
//     sign of a block; no quantizer writes one, so it is refused as corrupt;
//   * a NaN code (0x7F / 0xFF) in a weight is corrupt data (DataLoss naming the tensor and the
//     element), found when the weight is dequantized (DequantizeFp8Rows).
// A float (F32/BF16/F16) weight is used as it is, whatever the config says: Hugging Face leaves
// lm_head in high precision without listing it, and a partly quantized checkpoint is valid.
#ifndef VLSTACK_MODEL_FP8_WEIGHTS_H_
#define VLSTACK_MODEL_FP8_WEIGHTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/kernels.h"
#include "model/quantization_config.h"
#include "tensor/tensor.h"

namespace vls {

// The block scales of one FP8 weight; `data` null for a weight that is not FP8.
struct Fp8BlockScales {
  DType dtype = DType::kF32;   // F32, BF16 or F16
  const void* data = nullptr;  // [grid_rows, grid_cols], row-major
  int64_t grid_rows = 0, grid_cols = 0;
  int64_t block_rows = 0, block_cols = 0;  // bh, bw

  bool fp8() const { return data != nullptr; }
  // scale_inv[br][bc] as f32 (exact for every scale dtype). REQUIRES: fp8(), indices in range.
  float At(int64_t br, int64_t bc) const;
};

// A Linear weight as the checkpoint stores it: a dense F32/BF16/F16 matrix, or the F8_E4M3
// codes (m.dtype kF8E4M3, never read by a kernel) with their block scales.
struct WeightMatrix {
  kernels::Matrix m;  // [out, in]
  Fp8BlockScales fp8;
};

// "<m>.weight_scale_inv" for "<m>.weight" (any other name gets "_scale_inv" appended).
std::string Fp8ScaleName(const std::string& weight_name);

// The rule above for the Linear weight `weight_name` (its shape [rows, cols] already checked)
// and the tensor `<m>.weight_scale_inv` (null when the checkpoint has none): the block scales
// for an F8_E4M3 weight, empty ones for a float weight, or an error naming the tensor
// (kInvalidArgument for a mismatch with the config or a malformed scale tensor, kDataLoss for a
// scale value that is not finite, negative or too large).
StatusOr<Fp8BlockScales> BindFp8Scales(const std::optional<Fp8Quantization>& quant,
                                       const std::string& weight_name, const TensorView& weight,
                                       const TensorView* scale_inv);

// out[(r1 - r0) · w.cols] = rows [r0, r1) of the FP8 matrix `w` dequantized with `s` (the
// formula above). Returns false when a code is NaN, with its row and column in *bad_row,
// *bad_col (out is then incomplete). REQUIRES: w.dtype kF8E4M3, s.fp8() and bound to w's shape,
// 0 <= r0 <= r1 <= w.rows.
bool DequantizeFp8Rows(const kernels::Matrix& w, const Fp8BlockScales& s, int64_t r0, int64_t r1,
                       float* out, int64_t* bad_row, int64_t* bad_col);

// The DataLoss a NaN code at (row, col) of `weight_name` gives.
Status Fp8NaNError(const std::string& weight_name, int64_t row, int64_t col);

}  // namespace vls

#endif  // VLSTACK_MODEL_FP8_WEIGHTS_H_
