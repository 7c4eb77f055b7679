#include "base/status.h"

#include <gtest/gtest.h>

#include "base/checked_math.h"

namespace vls {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

Status UseHalf(int x, int* out) {
  VLS_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = DataLoss("tensor 'a' ends past the file");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DATA_LOSS: tensor 'a' ends past the file");
  EXPECT_EQ(s.WithContext("model.safetensors").message(),
            "model.safetensors: tensor 'a' ends past the file");
  EXPECT_EQ(Status::Ok().ToString(), "OK");
}

TEST(StatusTest, ParamTravelsAsData) {
  const Status s = InvalidArgument("\"x\" is bad");
  EXPECT_EQ(s.param(), "");  // never derived from the message
  const Status p = s.WithParam("messages[1].role");
  EXPECT_EQ(p.param(), "messages[1].role");
  EXPECT_EQ(p.message(), s.message());
  EXPECT_EQ(p.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.param(), "");  // a copy
  EXPECT_EQ(p.WithContext("request").param(), "messages[1].role");
  EXPECT_EQ(p.WithContext("request").message(), "request: \"x\" is bad");
  EXPECT_TRUE(Status::Ok().WithParam("x").ok());
  EXPECT_EQ(Status::Ok().WithParam("x").param(), "");
  StatusOr<int> v = p;
  EXPECT_EQ(v.status().param(), "messages[1].role");
}

TEST(StatusTest, AssignOrReturnPropagates) {
  int v = 0;
  EXPECT_TRUE(UseHalf(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status s = UseHalf(3, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd value 3");
}

TEST(CheckedMathTest, DetectsOverflow) {
  EXPECT_EQ(CheckedMul(1ull << 32, 1ull << 31).value(), 1ull << 63);
  EXPECT_FALSE(CheckedMul(1ull << 32, 1ull << 32).has_value());
  EXPECT_FALSE(CheckedAdd(~0ull, 1).has_value());
  const int64_t dims[] = {1 << 30, 1 << 30, 1 << 30};
  EXPECT_FALSE(CheckedByteCount(dims, 4).has_value());
  const int64_t neg[] = {2, -1};
  EXPECT_FALSE(CheckedByteCount(neg, 4).has_value());
  const int64_t ok[] = {2, 3};
  EXPECT_EQ(CheckedByteCount(ok, 2).value(), 12u);
}

}  // namespace
}  // namespace vls
