#include "vision/video_preprocess.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "vision/preprocess.h"
#include "vision/smart_resize.h"

// Expected values come from transformers' Python run by hand (video_processing_qwen3_vl.py's
// smart_resize and sample_frames with numpy 1.24, processing_qwen3_vl.py's
// _calculate_timestamps, Python 3.11 formatting).
namespace vls {
namespace {

using Indices = std::vector<int64_t>;

// What Qwen3-VL checkpoints ship in video_preprocessor_config.json.
VideoProcessorConfig Shipped() {
  VideoProcessorConfig c;
  c.min_pixels = 4096;
  c.max_pixels = 25165824;
  return c;
}

Indices Sample(int64_t total, double video_fps, const VideoSamplingOptions& o = {},
               const VideoProcessorConfig& cfg = Shipped()) {
  auto r = SampleFrameIndices(total, video_fps, cfg, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Indices{};
}

TEST(SampleFrameIndicesTest, FpsSamplingAsTransformers) {
  // 10 s at 30 fps: int(300 / 30 * 2) = 20 frames.
  EXPECT_EQ(Sample(300, 30.0), (Indices{0,   16,  31,  47,  63,  79,  94,  110, 126, 142,
                                        157, 173, 189, 205, 220, 236, 252, 268, 283, 299}));
  // int(100 / 29.97 * 2) = 6.
  EXPECT_EQ(Sample(100, 29.97), (Indices{0, 20, 40, 59, 79, 99}));
  // 4000 frames at 24 fps: 333 frames; 9000 at 30: 600.
  Indices a = Sample(4000, 24.0);
  ASSERT_EQ(a.size(), 333u);
  EXPECT_EQ(std::accumulate(a.begin(), a.end(), int64_t{0}), 665833);
  EXPECT_EQ(a[11], 132);
  EXPECT_EQ(a[12], 145);
  Indices b = Sample(9000, 30.0);
  ASSERT_EQ(b.size(), 600u);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), 2699700);
}

TEST(SampleFrameIndicesTest, ClampsToMinMaxAndTotal) {
  // int(10 / 30 * 2) = 0 -> min_frames 4.
  EXPECT_EQ(Sample(10, 30.0), (Indices{0, 3, 6, 9}));
  // Fewer frames than min_frames: every frame, no repeats.
  EXPECT_EQ(Sample(3, 30.0), (Indices{0, 1, 2}));
  EXPECT_EQ(Sample(1, 30.0), (Indices{0}));
  // 2000 wanted -> max_frames 768.
  Indices c = Sample(1000, 1.0);
  ASSERT_EQ(c.size(), 768u);
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), 383616);
  EXPECT_EQ((Indices(c.begin(), c.begin() + 5)), (Indices{0, 1, 3, 4, 5}));
  EXPECT_EQ(c.back(), 999);
  // A request's max_frames caps the config's.
  EXPECT_EQ(Sample(10, 30.0, {.max_frames = 3}), (Indices{0, 4, 9}));
  EXPECT_EQ(Sample(1000, 1.0, {.max_frames = 1000}).size(), 768u);  // never raises it
}

TEST(SampleFrameIndicesTest, RequestFpsReplacesTheConfigs) {
  EXPECT_EQ(Sample(100, 25.0, {.fps = 0.5}), (Indices{0, 33, 66, 99}));
  Indices d = Sample(100, 25.0, {.fps = 10});
  ASSERT_EQ(d.size(), 40u);
  EXPECT_EQ((Indices(d.begin(), d.begin() + 6)), (Indices{0, 3, 5, 8, 10, 13}));
  VideoProcessorConfig cfg = Shipped();
  cfg.fps = 0.5;
  EXPECT_EQ(Sample(100, 25.0, {}, cfg), (Indices{0, 33, 66, 99}));
  // A config's num_frames is used unless the request gives fps.
  cfg.num_frames = 3;
  EXPECT_EQ(Sample(100, 25.0, {}, cfg), (Indices{0, 50, 99}));
  EXPECT_EQ(Sample(100, 25.0, {.fps = 0.5}, cfg), (Indices{0, 33, 66, 99}));
}

TEST(SampleFrameIndicesTest, NumFramesIsUsedAsIs) {
  EXPECT_EQ(Sample(7, 1.0, {.num_frames = 4}), (Indices{0, 2, 4, 6}));
  EXPECT_EQ(Sample(5, 1.0, {.num_frames = 1}), (Indices{0}));  // linspace(0, 4, 1) = [0]
  // More than the video has: indices repeat (numpy's linspace over [0, 1]).
  EXPECT_EQ(Sample(2, 1.0, {.num_frames = 4}), (Indices{0, 0, 1, 1}));
  EXPECT_EQ(Sample(3, 30.0, {.num_frames = 7}), (Indices{0, 0, 1, 1, 1, 2, 2}));
  // Not clamped by max_frames (transformers applies max_frames to fps sampling only).
  EXPECT_EQ(Sample(100, 1.0, {.num_frames = 5, .max_frames = 2}).size(), 5u);
}

TEST(SampleFrameIndicesTest, RoundsHalvesToEven) {
  // linspace(0, 5, 5) = [0, 1.25, 2.5, 3.75, 5]: 2.5 -> 2.
  EXPECT_EQ(Sample(6, 1.0, {.num_frames = 5}), (Indices{0, 1, 2, 4, 5}));
  // [0, 3.5, 7]: 3.5 -> 4.
  EXPECT_EQ(Sample(8, 1.0, {.num_frames = 3}), (Indices{0, 4, 7}));
  // [0, 1.5, 3]: 1.5 -> 2.
  EXPECT_EQ(Sample(4, 1.0, {.num_frames = 3}), (Indices{0, 2, 3}));
  // [0, 2.25, 4.5, 6.75, 9]: 4.5 -> 4.
  EXPECT_EQ(Sample(10, 1.0, {.num_frames = 5}), (Indices{0, 2, 4, 7, 9}));
  // [0, 3.25, 6.5, 9.75, 13]: 6.5 -> 6.
  EXPECT_EQ(Sample(14, 1.0, {.num_frames = 5}), (Indices{0, 3, 6, 10, 13}));
  // [0, .5, 1, 1.5, 2, 2.5, 3]: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
  EXPECT_EQ(Sample(4, 1.0, {.num_frames = 7}), (Indices{0, 0, 1, 2, 2, 2, 3}));
}

TEST(SampleFrameIndicesTest, WithoutSamplingKeepsEveryFrame) {
  VideoProcessorConfig cfg = Shipped();
  cfg.do_sample_frames = false;
  EXPECT_EQ(Sample(5, 30.0, {.fps = 1}, cfg), (Indices{0, 1, 2, 3, 4}));
  EXPECT_FALSE(SampleFrameIndices(kMaxVideoFrames + 1, 30.0, cfg).ok());
}

TEST(SampleFrameIndicesTest, RefusesBadInput) {
  const VideoProcessorConfig cfg = Shipped();
  auto refused = [&](int64_t total, double fps, const VideoSamplingOptions& o,
                     const std::string& what) {
    auto r = SampleFrameIndices(total, fps, cfg, o);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  refused(0, 30.0, {}, "frame count");
  refused(-5, 30.0, {}, "frame count");
  refused(int64_t{1} << 32, 30.0, {}, "frame count");
  refused(10, 0.0, {}, "frame rate");
  refused(10, -1.0, {}, "frame rate");
  refused(10, std::numeric_limits<double>::infinity(), {}, "frame rate");
  refused(10, std::numeric_limits<double>::quiet_NaN(), {}, "frame rate");
  refused(10, 30.0, {.fps = 2, .num_frames = 4}, "mutually exclusive");
  refused(10, 30.0, {.fps = 0}, "fps");
  refused(10, 30.0, {.fps = 1e9}, "fps");
  refused(10, 30.0, {.num_frames = 0}, "num_frames");
  refused(10, 30.0, {.num_frames = kMaxVideoFrames + 1}, "num_frames");
  refused(10, 30.0, {.max_frames = 0}, "max_frames");
  // Python's int() of infinity raises.
  refused(int64_t{1} << 31, 1e-320, {}, "overflows");
  VideoProcessorConfig bad = cfg;
  bad.min_frames = 0;
  EXPECT_FALSE(SampleFrameIndices(10, 30.0, bad).ok());
}

std::pair<int, int> Resized(int64_t t, int h, int w, const VideoProcessorConfig& cfg) {
  auto r = VideoResizedSize(t, h, w, cfg);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::pair<int, int>{0, 0};
}

using Size = std::pair<int, int>;

TEST(VideoResizedSizeTest, ClassDefaults) {
  const VideoProcessorConfig d;                        // 131072 .. 786432 pixels for the whole clip
  EXPECT_EQ(Resized(2, 480, 640, d), Size(480, 640));  // 614400: inside the budget
  EXPECT_EQ(Resized(4, 480, 640, d), Size(384, 512));  // over: the max branch
  EXPECT_EQ(Resized(5, 720, 1280, d), Size(288, 512));   //
  EXPECT_EQ(Resized(768, 1080, 1920, d), Size(32, 32));  // floored at the factor
  EXPECT_EQ(Resized(3, 480, 640, d), Size(416, 576));    // t̄ = round(1.5)·2 = 4
  EXPECT_EQ(Resized(5, 100, 100, d), Size(192, 192));    // t̄ = round(2.5)·2 = 4; min branch
  EXPECT_EQ(Resized(2, 1, 1, d), Size(256, 256));        // 1x1 -> 32x32 first, then min
  EXPECT_EQ(Resized(2, 20, 20, d), Size(256, 256));      //
  EXPECT_EQ(Resized(2, 30, 31, d), Size(256, 288));      //
  EXPECT_EQ(Resized(2, 10, 100, d), Size(96, 832));      // tiny side upscaled: 32x320
  EXPECT_EQ(Resized(4, 16, 3000, d), Size(32, 6016));    // 32x6000, w̄ = round(187.5) = 188
  EXPECT_EQ(Resized(2, 100, 20000, d), Size(32, 8864));
}

TEST(VideoResizedSizeTest, ShippedConfig) {
  const VideoProcessorConfig s = Shipped();  // 4096 .. 25165824
  EXPECT_EQ(Resized(4, 480, 640, s), Size(480, 640));
  EXPECT_EQ(Resized(16, 480, 640, s), Size(480, 640));
  EXPECT_EQ(Resized(60, 1080, 1920, s), Size(480, 832));
  EXPECT_EQ(Resized(768, 1080, 1920, s), Size(128, 224));
  EXPECT_EQ(Resized(121, 360, 640, s), Size(320, 608));
  EXPECT_EQ(Resized(2, 10, 100, s), Size(32, 320));  // the upscale alone, no branch
  EXPECT_EQ(Resized(2, 31, 6200, s), Size(32, 6400));
  EXPECT_EQ(Resized(2, 1, 1, s), Size(64, 64));
  EXPECT_EQ(Resized(2, 100, 20000, s), Size(96, 20000));  // aspect exactly 200: allowed
}

TEST(VideoResizedSizeTest, CapPixelsPerFrame) {
  VideoProcessorConfig s = Shipped();
  s.cap_pixels_per_frame = true;
  // max_pixels = max(min(768·32², 25165824 // T), int(4096 · 1.05)) · T.
  EXPECT_EQ(Resized(4, 480, 640, s), Size(480, 640));     // 3145728
  EXPECT_EQ(Resized(2, 1080, 1920, s), Size(640, 1152));  // 1572864
  EXPECT_EQ(Resized(60, 1080, 1920, s), Size(480, 832));  // 25165800
  EXPECT_EQ(Resized(768, 1080, 1920, s), Size(128, 224));
  VideoProcessorConfig d;
  d.cap_pixels_per_frame = true;
  EXPECT_EQ(Resized(4, 480, 640, d), Size(384, 512));      // 786432
  EXPECT_EQ(Resized(16, 1080, 1920, d), Size(256, 480));   // the floor: 137625 · 16
  EXPECT_EQ(Resized(768, 1080, 1920, d), Size(256, 480));  // 137625 · 768
}

TEST(VideoResizedSizeTest, Refusals) {
  const VideoProcessorConfig s = Shipped();
  auto refused = [&](int64_t t, int h, int w, const std::string& what) {
    auto r = VideoResizedSize(t, h, w, s);
    ASSERT_FALSE(r.ok()) << t << " " << h << "x" << w;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  refused(1, 480, 640, "temporal_patch_size");  // transformers: t must be >= temporal_factor
  refused(0, 480, 640, "sampled frames");
  refused(kMaxVideoFrames + 1, 480, 640, "sampled frames");
  refused(2, 1, 300, "aspect ratio");  // 32x9600 after the upscale
  refused(2, 100, 20101, "aspect ratio");
  refused(2, 0, 640, "each side");
  refused(2, 480, kMaxSmartResizeSide + 1, "each side");
  refused(6144, 1 << 21, 1 << 21, "2^53");
  // Without do_resize the sides must already be multiples of the factor; one frame is fine.
  VideoProcessorConfig n = s;
  n.do_resize = false;
  EXPECT_EQ(Resized(1, 64, 96, n), Size(64, 96));
  EXPECT_FALSE(VideoResizedSize(2, 64, 100, n).ok());
}

TEST(VideoGridThwTest, PadsTheFrameCountAndCountsTokens) {
  auto g = VideoGridThw(4, 480, 640, Shipped());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*g, (GridThw{2, 30, 40}));
  EXPECT_EQ(VideoTokensPerGroup(*g, Shipped()), 300);
  g = VideoGridThw(5, 480, 640, Shipped());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*g, (GridThw{3, 30, 40}));
  g = VideoGridThw(60, 1080, 1920, Shipped());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*g, (GridThw{30, 30, 52}));
}

TEST(VideoTimestampsTest, AveragesEachGroup) {
  const Indices a{0, 99, 199, 299};
  EXPECT_EQ(VideoTimestamps(a, 30.0, 2), (std::vector<double>{1.65, 8.3}));
  // Odd counts repeat the last index.
  const Indices b{0, 1, 2};
  EXPECT_EQ(VideoTimestamps(b, 1.0, 2), (std::vector<double>{0.5, 2.0}));
  const Indices c{0, 10, 20, 30, 40};
  EXPECT_EQ(VideoTimestamps(c, 29.97, 2),
            (std::vector<double>{0.16683350016683351, 0.8341675008341676, 1.3346680013346681}));
  const Indices d{0, 15, 30, 45, 60};
  EXPECT_EQ(VideoTimestamps(d, 30000.0 / 1001, 2),
            (std::vector<double>{0.25025000000000003, 1.2512500000000002, 2.0020000000000002}));
  const Indices e{1};
  EXPECT_EQ(VideoTimestamps(e, 4.0, 2), (std::vector<double>{0.25}));
  EXPECT_EQ(VideoTimestamps(e, 4.0, 1), (std::vector<double>{0.25}));
  EXPECT_TRUE(VideoTimestamps({}, 4.0, 2).empty());
}

TEST(FormatTimestampTest, MatchesPythonFormat) {
  EXPECT_EQ(FormatTimestamp(1.65), "<1.6 seconds>");  // 1.65 is below 1.65 in binary
  EXPECT_EQ(FormatTimestamp(8.3), "<8.3 seconds>");
  EXPECT_EQ(FormatTimestamp(0.25), "<0.2 seconds>");  // an exact half: to even
  EXPECT_EQ(FormatTimestamp(0.75), "<0.8 seconds>");
  EXPECT_EQ(FormatTimestamp(1.25), "<1.2 seconds>");
  EXPECT_EQ(FormatTimestamp(0.05), "<0.1 seconds>");
  EXPECT_EQ(FormatTimestamp(0.15), "<0.1 seconds>");
  EXPECT_EQ(FormatTimestamp(2.35), "<2.4 seconds>");
  EXPECT_EQ(FormatTimestamp(12.45), "<12.4 seconds>");
  EXPECT_EQ(FormatTimestamp(0.25025000000000003), "<0.3 seconds>");
  EXPECT_EQ(FormatTimestamp(0.0), "<0.0 seconds>");
  EXPECT_EQ(FormatTimestamp(1000000.05), "<1000000.1 seconds>");
}

// Frame f's pixel (y, x, c): distinct across frames, rows, columns and channels.
uint8_t Pixel(int f, int y, int x, int c) {
  return static_cast<uint8_t>(f * 61 + y * 7 + x * 3 + c * 101);
}

std::vector<image::RgbImage> Clip(int frames, int h, int w) {
  std::vector<image::RgbImage> clip;
  for (int f = 0; f < frames; ++f) {
    image::RgbImage im;
    im.height = h;
    im.width = w;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) im.pixels.push_back(Pixel(f, y, x, c));
      }
    }
    clip.push_back(std::move(im));
  }
  return clip;
}

TEST(PreprocessVideoTest, PatchOrderOnThreeFramesWithThePadFrameRepeated) {
  VideoProcessorConfig cfg;
  cfg.min_pixels = 1;  // 64x32 frames stay as they are
  const int p = 16, m = 2, tp = 2;
  const auto clip = Clip(3, 64, 32);
  auto pv = PreprocessVideo(clip, cfg);
  ASSERT_TRUE(pv.ok()) << pv.status().ToString();
  ASSERT_EQ(pv->grids.size(), 1u);
  const GridThw g = pv->grids[0];
  EXPECT_EQ(g, (GridThw{2, 4, 2}));
  ASSERT_EQ(pv->cols, 3 * tp * p * p);
  ASSERT_EQ(pv->rows, 2 * 4 * 2);
  ASSERT_EQ(pv->data.size(), static_cast<size_t>(pv->rows * pv->cols));
  // Rows (t', bh, bw, ih, iw); features (c, tp, py, px); frame 3 is frame 2 again.
  int64_t row = 0;
  for (int t = 0; t < g.t; ++t) {
    for (int bh = 0; bh < g.h / m; ++bh) {
      for (int bw = 0; bw < g.w / m; ++bw) {
        for (int ih = 0; ih < m; ++ih) {
          for (int iw = 0; iw < m; ++iw, ++row) {
            int64_t col = 0;
            for (int c = 0; c < 3; ++c) {
              for (int k = 0; k < tp; ++k) {
                const int frame = std::min(t * tp + k, 2);
                for (int py = 0; py < p; ++py) {
                  for (int px = 0; px < p; ++px, ++col) {
                    const int y = (bh * m + ih) * p + py;
                    const int x = (bw * m + iw) * p + px;
                    const float want =
                        (static_cast<float>(Pixel(frame, y, x, c)) - 127.5f) / 127.5f;
                    ASSERT_EQ(pv->data[row * pv->cols + col], want)
                        << "row " << row << " col " << col;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(PreprocessVideoTest, TwoEqualFramesMatchTheImagePath) {
  // A still image is two equal frames: resized, normalised and patched alike (50x70 -> 64x64).
  const auto clip = Clip(1, 50, 70);
  const std::vector<image::RgbImage> frames{clip[0], clip[0]};
  VideoProcessorConfig vcfg;
  vcfg.min_pixels = 1;
  auto video = PreprocessVideo(frames, vcfg);
  ASSERT_TRUE(video.ok()) << video.status().ToString();
  ImageProcessorConfig icfg;
  icfg.min_pixels = 1;
  auto image = PreprocessImages({clip.data(), 1}, icfg);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(video->grids[0], (GridThw{1, 4, 4}));
  EXPECT_EQ(image->grids[0], video->grids[0]);
  EXPECT_EQ(image->data, video->data);
}

TEST(PreprocessVideoTest, OneFrameWithoutResizeIsPadded) {
  VideoProcessorConfig cfg;
  cfg.do_resize = false;
  cfg.do_normalize = false;
  auto pv = PreprocessVideo(Clip(1, 32, 32), cfg);
  ASSERT_TRUE(pv.ok()) << pv.status().ToString();
  EXPECT_EQ(pv->grids[0], (GridThw{1, 2, 2}));
  const int64_t plane = 16 * 16;
  for (int64_t r = 0; r < pv->rows; ++r) {
    for (int64_t c = 0; c < 3; ++c) {
      const float* t0 = pv->data.data() + r * pv->cols + (c * 2) * plane;
      EXPECT_TRUE(std::equal(t0, t0 + plane, t0 + plane)) << "row " << r;
    }
  }
  EXPECT_EQ(pv->data[1], Pixel(0, 0, 1, 0) * static_cast<float>(1.0 / 255));
  // With do_resize (transformers' smart_resize) one frame is refused.
  cfg.do_resize = true;
  EXPECT_FALSE(PreprocessVideo(Clip(1, 32, 32), cfg).ok());
}

TEST(VideoPreprocessorTest, FrameByFrameEqualsTheWholeClipAndChecksTheCount) {
  VideoProcessorConfig cfg;  // the class defaults resize 3 frames of 70x50 up to the budget
  const auto clip = Clip(3, 50, 70);
  auto whole = PreprocessVideo(clip, cfg);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto pre = VideoPreprocessor::Create(3, 50, 70, cfg);
  ASSERT_TRUE(pre.ok()) << pre.status().ToString();
  EXPECT_EQ(pre->grid(), whole->grids[0]);
  for (const image::RgbImage& f : clip) ASSERT_TRUE(pre->Add(f).ok());
  EXPECT_FALSE(pre->Add(clip[0]).ok());  // a fourth frame was not planned
  auto pv = pre->Finish();
  ASSERT_TRUE(pv.ok()) << pv.status().ToString();
  EXPECT_EQ(pv->data, whole->data);
  EXPECT_EQ(pv->grids, whole->grids);

  auto short_clip = VideoPreprocessor::Create(3, 50, 70, cfg);
  ASSERT_TRUE(short_clip.ok());
  ASSERT_TRUE(short_clip->Add(clip[0]).ok());
  EXPECT_FALSE(short_clip->Add(Clip(1, 50, 71)[0]).ok());  // another size
  EXPECT_FALSE(short_clip->Finish().ok());                 // 1 of 3 frames
}

TEST(PreprocessVideoTest, Refusals) {
  VideoProcessorConfig cfg;
  EXPECT_FALSE(PreprocessVideo({}, cfg).ok());
  auto clip = Clip(3, 40, 40);
  clip[2] = Clip(1, 40, 41)[0];
  auto r = PreprocessVideo(clip, cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("video frame 2"), std::string::npos) << r.status().ToString();
  clip = Clip(3, 40, 40);
  clip[1].pixels.pop_back();
  r = PreprocessVideo(clip, cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("video frame 1"), std::string::npos) << r.status().ToString();
  // The memory budget: 2 groups x 16 patches x 1536 floats.
  cfg.min_pixels = 1;
  EXPECT_FALSE(PreprocessVideo(Clip(4, 64, 64), cfg, nullptr, 2 * 16 * 1536 - 1).ok());
  EXPECT_TRUE(PreprocessVideo(Clip(4, 64, 64), cfg, nullptr, 2 * 16 * 1536).ok());
}

}  // namespace
}  // namespace vls
