// Element types and scalar conversions (bf16/f16 <-> f32, f8 e4m3 -> f32).
#ifndef VLSTACK_TENSOR_DTYPE_H_
#define VLSTACK_TENSOR_DTYPE_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace vls {

// kF8E4M3 is safetensors' "F8_E4M3" (torch.float8_e4m3fn, OCP FP8 "E4M3"): a 1-byte float
// with 1 sign, 4 exponent (bias 7) and 3 mantissa bits, subnormals, no infinities, and NaN at
// 0x7F / 0xFF; largest finite 448. Checkpoints store block-quantized Linear weights in it
// (model/fp8_weights.h); no kernel reads it directly.
enum class DType : int { kF32 = 0, kI32 = 1, kBF16 = 2, kF16 = 3, kF8E4M3 = 4 };

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF8E4M3: return 1;
  }
  return 0;
}

// The safetensors spelling: "F32", "I32", "BF16", "F16", "F8_E4M3".
std::string_view DTypeName(DType t);
// Parses a safetensors dtype name; returns false for names vlstack does not handle.
bool ParseDTypeName(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// E4M3 (the OCP "e4m3fn" variant) -> f32, exact: codes 0x7F and 0xFF give NaN, every other
// code its value (±0, subnormals k·2^-9, normals up to ±448).
float F8E4M3ToF32(uint8_t code);
// True for the two NaN codes, 0x7F and 0xFF.
constexpr bool F8E4M3IsNaN(uint8_t code) { return (code & 0x7Fu) == 0x7Fu; }
// f32 -> E4M3, round to nearest even, bit for bit as torch's float8_e4m3fn cast (c10
// fp8e4m3fn_from_fp32_value): NaN, and any magnitude that rounds above 448, gives the NaN code
// with the input's sign (no saturation: a quantizer clamps to ±448 first).
uint8_t F32ToF8E4M3(float f);

}  // namespace vls

#endif  // VLSTACK_TENSOR_DTYPE_H_
