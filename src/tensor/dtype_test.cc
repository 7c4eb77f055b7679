#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tensor/tensor.h"

namespace vls {
namespace {

TEST(DTypeTest, Bf16RoundTripAndRounding) {
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly half way between bf16 1.0 and 1.0078125: ties go to even (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 3.0f / 256)), 1.015625f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
}

TEST(DTypeTest, F16RoundTrip) {
  for (float v :
       {0.0f, 1.0f, -1.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.333251953125f}) {
    EXPECT_EQ(F16ToF32(F32ToF16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
}

TEST(DTypeTest, Names) {
  DType t;
  ASSERT_TRUE(ParseDTypeName("BF16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_EQ(DTypeName(DType::kI32), "I32");
  EXPECT_FALSE(ParseDTypeName("F64", &t));
}

// E4M3 by the OCP definition, written independently of dtype.cc's bit construction: sign,
// exponent e (bias 7), mantissa m; e = 0 is subnormal m/8 · 2^-6; S.1111.111 is NaN.
double E4M3ByFormula(int code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return sign * std::ldexp(m / 8.0, -6);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

TEST(DTypeTest, F8E4M3DecodesEveryCodeByTheFormula) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float got = F8E4M3ToF32(static_cast<uint8_t>(c));
    const double want = E4M3ByFormula(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_TRUE(F8E4M3IsNaN(static_cast<uint8_t>(c))) << c;
      ++nans;
      continue;
    }
    EXPECT_FALSE(F8E4M3IsNaN(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;  // -0 for 0x80
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(F8E4M3ToF32(0x7E), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(F8E4M3ToF32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
}

TEST(DTypeTest, F8E4M3EncodeRoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if (F8E4M3IsNaN(static_cast<uint8_t>(c))) continue;
    EXPECT_EQ(F32ToF8E4M3(F8E4M3ToF32(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(DTypeTest, F8E4M3EncodeRoundsToNearestEven) {
  // Every midpoint between two neighbouring positive codes goes to the even one; a hair above
  // it goes up, a hair below goes down (subnormals and normals alike).
  for (int c = 0; c + 1 < 0x7E; ++c) {
    const float lo = F8E4M3ToF32(static_cast<uint8_t>(c));
    const float hi = F8E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: a few significant bits
    EXPECT_EQ(F32ToF8E4M3(mid), (c % 2 == 0) ? c : c + 1) << c;
    EXPECT_EQ(F32ToF8E4M3(std::nextafter(mid, 1000.0f)), c + 1) << c;
    EXPECT_EQ(F32ToF8E4M3(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(F32ToF8E4M3(-mid), 0x80 | ((c % 2 == 0) ? c : c + 1)) << c;
  }
  // Below half the smallest subnormal: zero with the input's sign.
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(1.0f, -11)), 0x00);
  EXPECT_EQ(F32ToF8E4M3(-std::ldexp(1.0f, -11)), 0x80);
}

TEST(DTypeTest, F8E4M3EncodeOverflowAndNaNGiveTheNaNCode) {
  // As torch's float8_e4m3fn cast: 464 (the midpoint of 448 and the missing 480) ties to 448;
  // above it rounds to the NaN code; 480 and up, infinities and NaN are NaN.
  EXPECT_EQ(F32ToF8E4M3(464.0f), 0x7E);
  EXPECT_EQ(F32ToF8E4M3(465.0f), 0x7F);
  EXPECT_EQ(F32ToF8E4M3(480.0f), 0x7F);
  EXPECT_EQ(F32ToF8E4M3(-1e30f), 0xFF);
  EXPECT_EQ(F32ToF8E4M3(INFINITY), 0x7F);
  EXPECT_EQ(F32ToF8E4M3(NAN), 0x7F);
  DType t;
  ASSERT_TRUE(ParseDTypeName("F8_E4M3", &t));
  EXPECT_EQ(t, DType::kF8E4M3);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  EXPECT_FALSE(ParseDTypeName("F8_E5M2", &t));
}

TEST(TensorTest, ConvertsBetweenDtypes) {
  const float v[] = {1.0f, -0.5f, 3.0f, 0.25f};
  HostTensor b = FromF32As(DType::kBF16, {2, 2}, v);
  EXPECT_EQ(b.nbytes(), 8u);
  std::vector<float> back = ToF32Vector(b.view());
  EXPECT_EQ(back, std::vector<float>(v, v + 4));
  EXPECT_EQ(ShapeToString(b.shape()), "[2,2]");
  // F8_E4M3: codes round trip through FromF32As / ToF32Vector (no scale is involved).
  const float f8[] = {1.0f, -448.0f, 0.001953125f, 3.5f};
  HostTensor q = FromF32As(DType::kF8E4M3, {4}, f8);
  EXPECT_EQ(q.nbytes(), 4u);
  EXPECT_EQ(ToF32Vector(q.view()), std::vector<float>(f8, f8 + 4));
}

}  // namespace
}  // namespace vls
