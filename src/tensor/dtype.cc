#include "tensor/dtype.h"

#include <array>
#include <cmath>

namespace vls {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

bool ParseDTypeName(std::string_view name, DType* out) {
  if (name == "F32")
    *out = DType::kF32;
  else if (name == "I32")
    *out = DType::kI32;
  else if (name == "BF16")
    *out = DType::kBF16;
  else if (name == "F16")
    *out = DType::kF16;
  else if (name == "F8_E4M3")
    *out = DType::kF8E4M3;
  else
    return false;
  return true;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);  // subnormal or zero
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                               // subnormal in f16
    float a = std::bit_cast<float>(abs);
    // a * 2^24 rounded to nearest even gives the subnormal mantissa.
    float scaled = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(scaled));
  }
  uint32_t exp = ((abs >> 23) - 127 + 15) << 10;
  uint32_t mant = abs & 0x7fffffu;
  uint32_t h = exp | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // round to nearest even
  return static_cast<uint16_t>(sign | h);
}

namespace {

// The 256 E4M3 values as f32 bit patterns, built from the bit fields: a normal code's f32 has
// the same sign, exponent e - 7 + 127 and the 3 mantissa bits at the top of its 23; a
// subnormal's value m·2^-9 (m in 1..7) is normalised by shifting m up to its leading bit.
constexpr std::array<uint32_t, 256> MakeE4M3Table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) {
    const uint32_t sign = (c & 0x80u) << 24, exp = (c >> 3) & 0xFu, mant = c & 7u;
    uint32_t bits = 0;
    if ((c & 0x7Fu) == 0x7Fu) {
      bits = 0x7FC00000u;
    } else if (exp != 0) {
      bits = ((exp - 7 + 127) << 23) | (mant << 20);
    } else if (mant != 0) {
      int lead = 2;  // position of m's highest set bit
      while (((mant >> lead) & 1u) == 0) --lead;
      // m·2^-9 = 1.f · 2^(lead - 9), f the bits of m below its leading one.
      const uint32_t frac = (mant & ((1u << lead) - 1u)) << (23 - lead);
      bits = (static_cast<uint32_t>(lead - 9 + 127) << 23) | frac;
    }
    t[c] = sign | bits;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kE4M3Table = MakeE4M3Table();

}  // namespace

float F8E4M3ToF32(uint8_t code) { return std::bit_cast<float>(kE4M3Table[code]); }

uint8_t F32ToF8E4M3(float f) {
  // The algorithm of c10/util/Float8_e4m3fn.h (fp8e4m3fn_from_fp32_value), restated.
  uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  constexpr uint32_t kFirstNaNOrOverflow = 1087u << 20;  // 480.0f: rounds to 0x7F or beyond
  constexpr uint32_t kSubnormalLimit = 121u << 23;       // 2^-6, the smallest normal
  constexpr uint32_t kDenormMask = 141u << 23;           // 2^14: aligns m·2^-9 to the low bits
  uint8_t out = 0;
  if (bits >= kFirstNaNOrOverflow) {
    out = 0x7F;  // NaN, or a magnitude that does not fit
  } else if (bits < kSubnormalLimit) {
    // Adding 2^14 puts the subnormal's mantissa in the low bits, rounded to nearest even by
    // the f32 addition itself.
    const float sum = std::bit_cast<float>(bits) + std::bit_cast<float>(kDenormMask);
    out = static_cast<uint8_t>(std::bit_cast<uint32_t>(sum) - kDenormMask);
  } else {
    const uint32_t mant_odd = (bits >> 20) & 1u;
    bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu;  // re-bias, round half up
    bits += mant_odd;                                           // ...half to even
    out = static_cast<uint8_t>(bits >> 20);
  }
  return static_cast<uint8_t>(out | (sign >> 24));
}

}  // namespace vls
