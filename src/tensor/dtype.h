// Element types and scalar conversions (bf16/f16 <-> f32).
#ifndef VLSTACK_TENSOR_DTYPE_H_
#define VLSTACK_TENSOR_DTYPE_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace vls {

enum class DType : int { kF32 = 0, kI32 = 1, kBF16 = 2, kF16 = 3 };

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
  }
  return 0;
}

// The safetensors spelling: "F32", "I32", "BF16", "F16".
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

}  // namespace vls

#endif  // VLSTACK_TENSOR_DTYPE_H_
