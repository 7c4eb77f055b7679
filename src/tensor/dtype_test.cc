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

TEST(TensorTest, ConvertsBetweenDtypes) {
  const float v[] = {1.0f, -0.5f, 3.0f, 0.25f};
  HostTensor b = FromF32As(DType::kBF16, {2, 2}, v);
  EXPECT_EQ(b.nbytes(), 8u);
  std::vector<float> back = ToF32Vector(b.view());
  EXPECT_EQ(back, std::vector<float>(v, v + 4));
  EXPECT_EQ(ShapeToString(b.shape()), "[2,2]");
}

}  // namespace
}  // namespace vls
