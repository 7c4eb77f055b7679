#include "vision/resize.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "vision/image_test_util.h"

namespace vls {
namespace {

using image::RgbImage;

RgbImage Make(int h, int w, uint8_t (*fn)(int y, int x, int c)) {
  return testing::MakeImage(h, w, fn);
}

uint8_t Pattern(int y, int x, int c) {
  return static_cast<uint8_t>((y * 37 + x * 11 + c * 50 + (x * y * 13) % 29) % 256);
}

// torchvision 0.14 / torch 1.13 (Debian, AVX2):
// F.resize(torch.from_numpy(Pattern 5x7).permute(2, 0, 1), [h, w], BICUBIC, antialias=True).
TEST(ResizeTest, MatchesTorchvisionGolden) {
  const RgbImage in = Make(5, 7, Pattern);
  const std::vector<uint8_t> want_3x4 = {
      20,  70,  120, 44,  94,  144, 63,  113, 169, 81,  131, 189, 88,  138, 192, 118, 168, 231,
      133, 185, 197, 148, 208, 192, 148, 198, 180, 173, 226, 122, 188, 213, 56,  215, 114, 47,
  };
  const std::vector<uint8_t> want_9x11 = {
      0,   46,  96,  1,   51,  101, 8,   58,  108, 14,  64,  114, 21,  71,  121, 29,  79,  129, 35,
      85,  135, 42,  92,  142, 50,  100, 150, 58,  108, 158, 62,  112, 162, 8,   58,  108, 14,  64,
      114, 24,  74,  124, 35,  85,  135, 41,  91,  141, 44,  94,  144, 54,  104, 154, 62,  112, 162,
      65,  115, 165, 75,  125, 175, 82,  132, 182, 31,  81,  131, 41,  91,  141, 57,  107, 157, 74,
      124, 174, 78,  128, 178, 74,  124, 174, 90,  140, 190, 98,  148, 198, 93,  143, 193, 107, 157,
      207, 119, 169, 219, 51,  101, 151, 66,  116, 166, 87,  137, 187, 99,  149, 199, 103, 153, 202,
      102, 152, 202, 114, 164, 224, 120, 170, 235, 118, 168, 232, 130, 180, 244, 139, 189, 253, 71,
      121, 171, 89,  139, 189, 113, 163, 213, 118, 168, 218, 122, 172, 222, 127, 177, 227, 132, 182,
      232, 137, 187, 237, 142, 192, 242, 148, 198, 248, 152, 202, 252, 93,  143, 191, 105, 155, 213,
      124, 174, 242, 135, 185, 253, 138, 188, 255, 137, 187, 254, 146, 195, 154, 157, 211, 99,  167,
      233, 120, 167, 235, 121, 164, 232, 119, 114, 164, 215, 123, 173, 215, 139, 189, 218, 154, 204,
      233, 155, 205, 246, 149, 199, 230, 161, 212, 76,  177, 222, 0,   191, 223, 23,  189, 218, 22,
      184, 214, 17,  137, 187, 250, 151, 201, 174, 171, 221, 78,  177, 227, 87,  179, 229, 97,  180,
      230, 94,  184, 248, 46,  197, 205, 27,  219, 94,  53,  223, 77,  58,  221, 86,  56,  149, 199,
      255, 165, 215, 150, 188, 238, 0,   189, 239, 5,   192, 242, 14,  196, 246, 19,  196, 255, 33,
      208, 195, 53,  232, 21,  76,  240, 0,   84,  241, 14,  85,
  };
  RgbImage down = ResizeBicubicAntialias(in, 3, 4);
  EXPECT_EQ(down.height, 3);
  EXPECT_EQ(down.width, 4);
  EXPECT_EQ(down.pixels, want_3x4);
  RgbImage up = ResizeBicubicAntialias(in, 9, 11);
  EXPECT_EQ(up.pixels, want_9x11);
}

TEST(ResizeTest, SameSizeIsACopy) {
  const RgbImage in = Make(13, 17, Pattern);
  RgbImage out = ResizeBicubicAntialias(in, 13, 17);
  EXPECT_EQ(out.pixels, in.pixels);
}

TEST(ResizeTest, ConstantImagesStayConstant) {
  // The weights of each output sum to one, so a flat colour survives any scale.
  const int sizes[][4] = {{1, 1, 32, 32}, {64, 48, 32, 32}, {7, 300, 64, 32}, {100, 3, 32, 96}};
  for (const auto& s : sizes) {
    RgbImage in =
        Make(s[0], s[1], [](int, int, int c) { return static_cast<uint8_t>(40 + 90 * c); });
    RgbImage out = ResizeBicubicAntialias(in, s[2], s[3]);
    ASSERT_EQ(out.pixels.size(), static_cast<size_t>(s[2]) * s[3] * 3);
    for (size_t i = 0; i < out.pixels.size(); ++i) {
      ASSERT_EQ(out.pixels[i], 40 + 90 * (i % 3)) << "pixel " << i / 3;
    }
  }
}

TEST(ResizeTest, ChannelsAreIndependentAndInterleaved) {
  // Red carries a horizontal ramp, green a vertical one, blue stays 0: each output channel
  // only sees its own input channel.
  RgbImage in = Make(40, 60, [](int y, int x, int c) {
    return static_cast<uint8_t>(c == 0 ? x * 4 : c == 1 ? y * 6 : 0);
  });
  RgbImage out = ResizeBicubicAntialias(in, 20, 30);
  for (int y = 0; y < 20; ++y) {
    for (int x = 0; x < 30; ++x) {
      EXPECT_EQ(out.At(y, x, 2), 0);
      EXPECT_EQ(out.At(y, x, 1), out.At(y, 0, 1)) << "green depends on x at " << y << "," << x;
      EXPECT_EQ(out.At(y, x, 0), out.At(0, x, 0)) << "red depends on y at " << y << "," << x;
    }
  }
  // A linear ramp stays linear inside (Keys' cubic reproduces it): 2:1 down, x*4 -> about x*8+2.
  for (int x = 3; x < 27; ++x) EXPECT_NEAR(out.At(10, x, 0), 8 * x + 2, 1) << x;
}

TEST(ResizeTest, ThreadPoolGivesTheSameBytes) {
  RgbImage in = Make(301, 207, [](int y, int x, int c) {
    return static_cast<uint8_t>((y * 7919 + x * 104729 + c * 31) % 251);
  });
  auto pool = ThreadPool::Create(3);
  ASSERT_TRUE(pool.ok());
  for (auto [h, w] : {std::pair{96, 64}, std::pair{512, 416}, std::pair{301, 64}}) {
    RgbImage one = ResizeBicubicAntialias(in, h, w);
    RgbImage many = ResizeBicubicAntialias(in, h, w, pool->get());
    EXPECT_EQ(one.pixels, many.pixels) << h << "x" << w;
  }
}

TEST(ResizeTest, PortablePathGivesTheSameBytes) {
  // Without the FMA instruction std::fma computes the same fused results (slower).
  RgbImage in = Make(97, 131, [](int y, int x, int c) {
    return static_cast<uint8_t>((y * 7919 + x * 104729 + c * 31) % 251);
  });
  for (auto [h, w] : {std::pair{32, 64}, std::pair{96, 128}, std::pair{320, 416}, std::pair{97, 33},
                      std::pair{16, 131}}) {
    EXPECT_EQ(ResizeBicubicAntialias(in, h, w).pixels,
              ResizeBicubicAntialias(in, h, w, nullptr, /*allow_fma_instruction=*/false).pixels)
        << h << "x" << w;
  }
  // Against the golden too.
  const RgbImage pattern = Make(5, 7, Pattern);
  EXPECT_EQ(ResizeBicubicAntialias(pattern, 9, 11, nullptr, false).pixels,
            ResizeBicubicAntialias(pattern, 9, 11).pixels);
}

}  // namespace
}  // namespace vls
