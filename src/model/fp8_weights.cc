#include "model/fp8_weights.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

namespace vls {
namespace {

// The largest scale whose product with the largest E4M3 magnitude (448) is finite in f32.
constexpr float kMaxFp8Scale = FLT_MAX / 448.0f;

std::string FloatText(float f) {
  std::ostringstream o;
  o.precision(9);
  o << f;
  return o.str();
}

}  // namespace

float Fp8BlockScales::At(int64_t br, int64_t bc) const {
  const int64_t i = br * grid_cols + bc;
  switch (dtype) {
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF32: {
      float f = 0;
      std::memcpy(&f, static_cast<const std::byte*>(data) + i * 4, 4);
      return f;
    }
    case DType::kI32:
    case DType::kF8E4M3: break;  // refused by BindFp8Scales
  }
  return NAN;
}

std::string Fp8ScaleName(const std::string& weight_name) { return weight_name + "_scale_inv"; }

StatusOr<Fp8BlockScales> BindFp8Scales(const std::optional<Fp8Quantization>& quant,
                                       const std::string& weight_name, const TensorView& weight,
                                       const TensorView* scale_inv) {
  const std::string scale_name = Fp8ScaleName(weight_name);
  const std::string t = "tensor '" + weight_name + "'";
  if (weight.dtype != DType::kF8E4M3) {
    if (scale_inv != nullptr) {
      return InvalidArgument("tensor '" + scale_name + "' is given but '" + weight_name + "' is " +
                             std::string(DTypeName(weight.dtype)) +
                             ", not F8_E4M3: the scales would be ignored");
    }
    return Fp8BlockScales{};
  }
  if (!quant) {
    return InvalidArgument(t +
                           " is F8_E4M3 but config.json declares no quantization_config "
                           "(quant_method \"fp8\" with weight_block_size)");
  }
  std::string key;
  if (Fp8ModuleExcluded(*quant, weight_name, &key)) {
    return InvalidArgument(t + " is F8_E4M3 but quantization_config.modules_to_not_convert " +
                           "lists its module ('" + key + "')");
  }
  if (scale_inv == nullptr) {
    return InvalidArgument(t + " is F8_E4M3 but its block scales '" + scale_name + "' are missing");
  }
  if (weight.shape.size() != 2) {
    return InvalidArgument(t + " is F8_E4M3 with shape " + ShapeToString(weight.shape) +
                           "; only 2-D Linear weights may be FP8");
  }
  const DType sd = scale_inv->dtype;
  if (sd != DType::kF32 && sd != DType::kBF16 && sd != DType::kF16) {
    return InvalidArgument("tensor '" + scale_name + "' has dtype " + std::string(DTypeName(sd)) +
                           "; block scales must be F32, BF16 or F16");
  }
  Fp8BlockScales s;
  s.dtype = sd;
  s.block_rows = quant->block_rows;
  s.block_cols = quant->block_cols;
  // Both bounded (dims < 2^63, blocks >= 1), so neither sum overflows.
  s.grid_rows = weight.shape[0] / s.block_rows + (weight.shape[0] % s.block_rows != 0);
  s.grid_cols = weight.shape[1] / s.block_cols + (weight.shape[1] % s.block_cols != 0);
  const Shape want{s.grid_rows, s.grid_cols};
  if (scale_inv->shape != want) {
    return InvalidArgument("tensor '" + scale_name + "' has shape " +
                           ShapeToString(scale_inv->shape) + " but '" + weight_name + "' " +
                           ShapeToString(weight.shape) + " in blocks of " +
                           std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols) +
                           " (weight_block_size) needs " + ShapeToString(want));
  }
  s.data = scale_inv->data;
  for (int64_t br = 0; br < s.grid_rows; ++br) {
    for (int64_t bc = 0; bc < s.grid_cols; ++bc) {
      const float v = s.At(br, bc);
      // NaN fails every comparison, so !(v >= 0) also catches it.
      if (!(v >= 0.0f) || !(v <= kMaxFp8Scale)) {
        return DataLoss("tensor '" + scale_name + "' block [" + std::to_string(br) + ", " +
                        std::to_string(bc) + "] holds " + FloatText(v) +
                        "; a block scale must be finite, not negative and at most FLT_MAX/448 "
                        "(the file is corrupt)");
      }
    }
  }
  return s;
}

bool DequantizeFp8Rows(const kernels::Matrix& w, const Fp8BlockScales& s, int64_t r0, int64_t r1,
                       float* out, int64_t* bad_row, int64_t* bad_col) {
  const int64_t cols = w.cols;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  std::vector<float> scales(static_cast<size_t>(s.grid_cols));
  int64_t scale_row = -1;
  for (int64_t r = r0; r < r1; ++r) {
    if (r / s.block_rows != scale_row) {
      scale_row = r / s.block_rows;
      for (int64_t bc = 0; bc < s.grid_cols; ++bc) scales[size_t(bc)] = s.At(scale_row, bc);
    }
    const uint8_t* in = codes + r * cols;
    float* o = out + (r - r0) * cols;
    bool nan = false;
    for (int64_t c0 = 0, bc = 0; c0 < cols; c0 += s.block_cols, ++bc) {
      const float scale = scales[size_t(bc)];
      const int64_t c1 = std::min(cols, c0 + s.block_cols);
      for (int64_t c = c0; c < c1; ++c) {
        nan |= F8E4M3IsNaN(in[c]);
        o[c] = F8E4M3ToF32(in[c]) * scale;
      }
    }
    if (nan) {
      for (int64_t c = 0; c < cols; ++c) {
        if (F8E4M3IsNaN(in[c])) {
          *bad_row = r;
          *bad_col = c;
          return false;
        }
      }
    }
  }
  return true;
}

Status Fp8NaNError(const std::string& weight_name, int64_t row, int64_t col) {
  return DataLoss("tensor '" + weight_name + "' holds the F8_E4M3 NaN code at [" +
                  std::to_string(row) + ", " + std::to_string(col) +
                  "]; a quantized weight is never NaN (the file is corrupt)");
}

}  // namespace vls
