#include "vision/preprocess.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "vision/image_test_util.h"
#include "vision/resize.h"

namespace vls {
namespace {

using image::RgbImage;

RgbImage Make(int h, int w, uint8_t (*fn)(int y, int x, int c)) {
  return testing::MakeImage(h, w, fn);
}

// Each pixel says where it is: R = y, G = x, B = 7.
uint8_t Coordinates(int y, int x, int c) {
  return static_cast<uint8_t>(c == 0 ? y : c == 1 ? x : 7);
}

ImageProcessorConfig RawValues() {
  ImageProcessorConfig cfg;
  cfg.do_rescale = false;
  cfg.do_normalize = false;
  cfg.min_pixels = 1024;
  return cfg;
}

float Value(const PixelValues& pv, int64_t row, int64_t col) {
  return pv.data[row * pv.cols + col];
}

TEST(PreprocessTest, PatchOrderIsMergeWindowOrder) {
  // 64 x 96 is a multiple of 32: no resize; grid (1, 4, 6); 24 patches of 3*2*16*16 values.
  const RgbImage im = Make(64, 96, Coordinates);
  auto pv = PreprocessImages({&im, 1}, RawValues());
  ASSERT_TRUE(pv.ok()) << pv.status().ToString();
  ASSERT_EQ(pv->grids.size(), 1u);
  EXPECT_EQ(pv->grids[0], (GridThw{1, 4, 6}));
  EXPECT_EQ(pv->rows, 24);
  EXPECT_EQ(pv->cols, 1536);
  // Hand-picked rows: row 1 is the window's top-right patch (x from 16), row 2 its bottom-left
  // (y from 16), row 4 the next window's top-left (x from 32), row 12 the second window row's
  // first patch (y from 32).
  struct Pick {
    int row, y0, x0;
  };
  for (const Pick& p : {Pick{0, 0, 0}, Pick{1, 0, 16}, Pick{2, 16, 0}, Pick{3, 16, 16},
                        Pick{4, 0, 32}, Pick{11, 16, 80}, Pick{12, 32, 0}, Pick{23, 48, 80}}) {
    EXPECT_EQ(Value(*pv, p.row, 0), p.y0) << "row " << p.row;               // c 0, t 0, py 0, px 0
    EXPECT_EQ(Value(*pv, p.row, 512), p.x0) << "row " << p.row;             // c 1
    EXPECT_EQ(Value(*pv, p.row, 512 + 5), p.x0 + 5) << "row " << p.row;     // px 5
    EXPECT_EQ(Value(*pv, p.row, 3 * 16 + 2), p.y0 + 3) << "row " << p.row;  // py 3, px 2
    EXPECT_EQ(Value(*pv, p.row, 1024 + 100), 7) << "row " << p.row;         // c 2
  }
  // Every value: row = ((bh * 3) + bw) * 4 + ih * 2 + iw; col = ((c * 2 + t) * 16 + py) * 16 + px.
  for (int64_t row = 0; row < pv->rows; ++row) {
    const int64_t window = row / 4, bh = window / 3, bw = window % 3;
    const int64_t ih = (row % 4) / 2, iw = row % 2;
    for (int64_t col = 0; col < pv->cols; ++col) {
      const int64_t c = col / 512, py = (col / 16) % 16, px = col % 16;
      const int64_t y = (bh * 2 + ih) * 16 + py, x = (bw * 2 + iw) * 16 + px;
      ASSERT_EQ(Value(*pv, row, col),
                Coordinates(static_cast<int>(y), static_cast<int>(x), static_cast<int>(c)))
          << row << "," << col;
    }
  }
}

TEST(PreprocessTest, StillImageIsRepeatedOverTheTemporalPatch) {
  const RgbImage im = Make(32, 32, Coordinates);
  ImageProcessorConfig cfg = RawValues();
  for (int tp : {1, 2, 3}) {
    cfg.temporal_patch_size = tp;
    auto pv = PreprocessImages({&im, 1}, cfg);
    ASSERT_TRUE(pv.ok()) << pv.status().ToString();
    EXPECT_EQ(pv->grids[0], (GridThw{1, 2, 2}));
    EXPECT_EQ(pv->cols, 3 * tp * 256);
    for (int64_t row = 0; row < pv->rows; ++row) {
      for (int c = 0; c < 3; ++c) {
        for (int t = 1; t < tp; ++t) {
          for (int k = 0; k < 256; ++k) {
            ASSERT_EQ(Value(*pv, row, (c * tp + t) * 256 + k), Value(*pv, row, c * tp * 256 + k));
          }
        }
      }
    }
  }
}

TEST(PreprocessTest, NormalisesAsTheFusedFloatOps) {
  RgbImage im = Make(
      32, 32, [](int y, int x, int c) { return static_cast<uint8_t>((y * 32 + x + c) % 256); });
  ImageProcessorConfig cfg;  // Qwen3-VL: mean = std = 0.5, rescale 1/255
  cfg.min_pixels = 1024;
  auto pv = PreprocessImages({&im, 1}, cfg);
  ASSERT_TRUE(pv.ok()) << pv.status().ToString();
  // Row 0 = patch (0, 0): col px is pixel (0, px) of channel 0; x = px.
  EXPECT_EQ(Value(*pv, 0, 0), -1.0f);  // (0 - 127.5) / 127.5
  EXPECT_EQ(Value(*pv, 0, 1), (1.0f - 127.5f) / 127.5f);
  EXPECT_FLOAT_EQ(Value(*pv, 0, 15), (15 / 255.0f - 0.5f) / 0.5f);
  // CLIP statistics: m = f32(mean) * f32(255), s = f32(std) * f32(255), then (x - m) / s.
  cfg.image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  cfg.image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  pv = PreprocessImages({&im, 1}, cfg);
  ASSERT_TRUE(pv.ok());
  const float inv = static_cast<float>(1.0 / (1.0 / 255));
  for (int c = 0; c < 3; ++c) {
    for (int px = 0; px < 16; ++px) {
      const float x = static_cast<float>((px + c) % 256);
      const float m = cfg.image_mean[c] * inv;
      const float s = cfg.image_std[c] * inv;
      ASSERT_EQ(Value(*pv, 0, c * 512 + px), (x - m) / s) << c << "," << px;
    }
  }
  // Rescale only; normalise only.
  cfg.do_normalize = false;
  pv = PreprocessImages({&im, 1}, cfg);
  ASSERT_TRUE(pv.ok());
  EXPECT_EQ(Value(*pv, 0, 7), 7.0f * static_cast<float>(1.0 / 255));
  cfg.do_normalize = true;
  cfg.do_rescale = false;
  pv = PreprocessImages({&im, 1}, cfg);
  ASSERT_TRUE(pv.ok());
  EXPECT_EQ(Value(*pv, 0, 7), (7.0f - cfg.image_mean[0]) / cfg.image_std[0]);
}

TEST(PreprocessTest, ResizesWithSmartResizeAndConcatenatesImages) {
  // 480 x 640: the spec's example, unchanged, grid (1, 30, 40), 1200 patches, 300 tokens.
  const RgbImage a = Make(480, 640, Coordinates);
  // 40 x 50 (below min_pixels 65536): smart_resize -> 224 x 288, bicubic upscaled.
  const RgbImage b =
      Make(40, 50, [](int y, int x, int c) { return static_cast<uint8_t>(x * 5 + y + c); });
  const std::vector<RgbImage> images = {a, b};
  ImageProcessorConfig cfg;
  auto pv = PreprocessImages(images, cfg);
  ASSERT_TRUE(pv.ok()) << pv.status().ToString();
  ASSERT_EQ(pv->grids.size(), 2u);
  EXPECT_EQ(pv->grids[0], (GridThw{1, 30, 40}));
  EXPECT_EQ(ImageTokens(pv->grids[0], cfg), 300);
  auto size_b = ResizedImageSize(40, 50, cfg);
  ASSERT_TRUE(size_b.ok());
  EXPECT_EQ(pv->grids[1], (GridThw{1, size_b->first / 16, size_b->second / 16}));
  EXPECT_EQ(pv->rows, 1200 + int64_t{pv->grids[1].h} * pv->grids[1].w);
  ASSERT_EQ(pv->data.size(), static_cast<size_t>(pv->rows * pv->cols));
  // The second image's rows follow the first's and hold its resized pixels.
  auto alone = PreprocessImages({&b, 1}, cfg);
  ASSERT_TRUE(alone.ok());
  ASSERT_EQ(alone->data.size() + 1200 * 1536, pv->data.size());
  EXPECT_TRUE(std::equal(alone->data.begin(), alone->data.end(), pv->data.begin() + 1200 * 1536));
  const RgbImage resized = ResizeBicubicAntialias(b, size_b->first, size_b->second);
  EXPECT_EQ(Value(*alone, 0, 1), (resized.At(0, 1, 0) - 127.5f) / 127.5f);
  // ImageGridThw agrees without touching pixels.
  auto g = ImageGridThw(40, 50, cfg);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, pv->grids[1]);
}

TEST(PreprocessTest, EmptyListGivesNothing) {
  auto pv = PreprocessImages({}, ImageProcessorConfig{});
  ASSERT_TRUE(pv.ok());
  EXPECT_EQ(pv->rows, 0);
  EXPECT_TRUE(pv->data.empty());
  EXPECT_TRUE(pv->grids.empty());
}

TEST(PreprocessTest, RefusesBadImagesAndConfigs) {
  ImageProcessorConfig cfg;
  RgbImage ok = Make(32, 32, Coordinates);
  RgbImage short_pixels = ok;
  short_pixels.pixels.pop_back();
  RgbImage zero = ok;
  zero.width = 0;
  RgbImage thin = Make(1, 201, Coordinates);  // aspect ratio 201
  for (const RgbImage* bad : {&short_pixels, &zero, &thin}) {
    const std::vector<RgbImage> images = {ok, *bad};
    auto pv = PreprocessImages(images, cfg);
    ASSERT_FALSE(pv.ok());
    EXPECT_EQ(pv.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(pv.status().message().find("image 1"), std::string::npos) << pv.status().ToString();
  }
  // Without do_resize the sides must be multiples of 32.
  cfg.do_resize = false;
  RgbImage odd = Make(48, 64, Coordinates);
  EXPECT_FALSE(PreprocessImages({&odd, 1}, cfg).ok());
  RgbImage even = Make(64, 96, Coordinates);
  EXPECT_TRUE(PreprocessImages({&even, 1}, cfg).ok());
  // A memory budget below the output.
  auto over = PreprocessImages({&even, 1}, cfg, nullptr, 24 * 1536 - 1);
  EXPECT_FALSE(over.ok());
  EXPECT_TRUE(PreprocessImages({&even, 1}, cfg, nullptr, 24 * 1536).ok());
  // A hand-made config outside the parser's bounds.
  cfg.patch_size = 0;
  EXPECT_FALSE(PreprocessImages({&even, 1}, cfg).ok());
  cfg.patch_size = 1;  // a 1-pixel patch: the grid side passes kMaxGridSide at 40000 pixels
  cfg.do_resize = true;
  cfg.max_pixels = kMaxImageProcessorPixels;
  EXPECT_FALSE(ImageGridThw(100, 40000, cfg).ok());
}

}  // namespace
}  // namespace vls
