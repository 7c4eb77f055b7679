#include "vision/smart_resize.h"

#include <gtest/gtest.h>

#include <cmath>

namespace vls {
namespace {

struct Case {
  int h, w, factor;
  int64_t min_px, max_px;
  int want_h, want_w;
};

// Expected values from transformers' smart_resize run in Python (tests/oracle/preprocess_ref.py
// holds the same function).
TEST(SmartResizeTest, MatchesPythonTable) {
  const Case cases[] = {
      {480, 640, 32, 65536, 16777216, 480, 640},  // spec §D.3's example: unchanged
      {480, 976, 32, 65536, 16777216, 480, 960},  // 30.5 rounds to 30 (C's round() gives 31)
      {80, 1008, 32, 1024, 16777216, 64, 1024},   // 2.5 -> 2 and 31.5 -> 32: half to even
      {48, 48, 32, 1024, 1 << 20, 64, 64},        // 1.5 -> 2
      {100, 100, 32, 65536, 16777216, 256, 256},  // below min_pixels: scaled up
      {1, 1, 32, 65536, 16777216, 256, 256},      // tiny: no "smaller than factor" refusal
      {1, 200, 32, 65536, 16777216, 32, 3648},    // aspect ratio exactly 200 is allowed
      {3000, 4000, 32, 65536, 16777216, 3008, 4000},
      {4000, 3000, 32, 65536, 1003520, 1152, 864},  // above max_pixels: scaled down
      {1, 1, 28, 3136, 1003520, 56, 56},            // Qwen2-VL's factor and defaults
      {10000, 50, 32, 65536, 16777216, 9984, 64},
      {50, 10000, 32, 65536, 1 << 20, 64, 9984},
      {224, 224, 28, 3136, 1003520, 224, 224},
      {1080, 1920, 32, 65536, 16777216, 1088, 1920},
      {2160, 3840, 32, 65536, 16777216, 2176, 3840},
      {8192, 8192, 32, 65536, 16777216, 4096, 4096},
      {33, 17, 16, 256, 4096, 32, 16},
      {7, 1400, 32, 1024, 65536, 32, 480},
      {1, 2, 32, 1, 1, 32, 32},  // max(factor, ...) keeps one window even above max_pixels
  };
  for (const Case& c : cases) {
    auto r = SmartResize(c.h, c.w, c.factor, c.min_px, c.max_px);
    ASSERT_TRUE(r.ok()) << c.h << "x" << c.w << ": " << r.status().ToString();
    EXPECT_EQ(r->first, c.want_h) << c.h << "x" << c.w;
    EXPECT_EQ(r->second, c.want_w) << c.h << "x" << c.w;
  }
}

TEST(SmartResizeTest, Spec640x480GivesThe300TokenGrid) {
  auto r = SmartResize(480, 640, 32, 65536, 16777216);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first / 16, 30);
  EXPECT_EQ(r->second / 16, 40);
  EXPECT_EQ((r->first / 32) * (r->second / 32), 300);
}

TEST(SmartResizeTest, RefusesAspectRatioOver200) {
  EXPECT_TRUE(SmartResize(1, 200, 32, 65536, 16777216).ok());
  EXPECT_TRUE(SmartResize(2000, 10, 32, 65536, 16777216).ok());
  for (auto [h, w] : {std::pair{1, 201}, std::pair{201, 1}, std::pair{10, 2001}}) {
    auto r = SmartResize(h, w, 32, 65536, 16777216);
    ASSERT_FALSE(r.ok()) << h << "x" << w;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("aspect ratio"), std::string::npos);
  }
}

TEST(SmartResizeTest, RefusesBadArguments) {
  EXPECT_FALSE(SmartResize(0, 10, 32, 1, 100).ok());
  EXPECT_FALSE(SmartResize(10, -1, 32, 1, 100).ok());
  EXPECT_FALSE(SmartResize(kMaxSmartResizeSide + 1, kMaxSmartResizeSide, 32, 1, 100).ok());
  EXPECT_FALSE(SmartResize(10, 10, 0, 1, 100).ok());
  EXPECT_FALSE(SmartResize(10, 10, 32, 0, 100).ok());
  EXPECT_FALSE(SmartResize(10, 10, 32, 200, 100).ok());
}

TEST(SmartResizeTest, ResultIsAPositiveMultipleOfTheFactor) {
  // A sweep of sizes and aspect ratios up to the limit.
  for (int h = 1; h < 600; h += 37) {
    for (int w = 1; w < 5000; w += 211) {
      if (std::max(h, w) > 200 * std::min(h, w)) continue;
      auto r = SmartResize(h, w, 32, 4096, 1 << 18);
      ASSERT_TRUE(r.ok()) << h << "x" << w;
      EXPECT_EQ(r->first % 32, 0);
      EXPECT_EQ(r->second % 32, 0);
      EXPECT_GE(r->first, 32);
      EXPECT_GE(r->second, 32);
    }
  }
}

TEST(SmartResizeTest, RoundHalfToEvenIsPythonsRound) {
  EXPECT_EQ(RoundHalfToEven(0.5), 0.0);
  EXPECT_EQ(RoundHalfToEven(1.5), 2.0);
  EXPECT_EQ(RoundHalfToEven(2.5), 2.0);
  EXPECT_EQ(RoundHalfToEven(30.5), 30.0);
  EXPECT_EQ(RoundHalfToEven(31.5), 32.0);
  EXPECT_EQ(RoundHalfToEven(2.4999999999999996), 2.0);
  EXPECT_EQ(RoundHalfToEven(2.5000000000000004), 3.0);
  EXPECT_EQ(RoundHalfToEven(-1.5), -2.0);
  EXPECT_EQ(RoundHalfToEven(7.0), 7.0);
}

}  // namespace
}  // namespace vls
