#include "vision/video_processor_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/file.h"

namespace vls {
namespace {

// Qwen3-VL's shipped video_preprocessor_config.json.
constexpr char kQwen3Vl[] =
    R"({"do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
        "do_sample_frames": true, "fps": 2, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "max_frames": 768, "merge_size": 2, "min_frames": 4,
        "patch_size": 16, "resample": 3, "rescale_factor": 0.00392156862745098,
        "return_metadata": false, "size": {"longest_edge": 25165824, "shortest_edge": 4096},
        "temporal_patch_size": 2, "video_processor_type": "Qwen3VLVideoProcessor",
        "processor_class": "Qwen3VLProcessor"})";

constexpr char kLabel[] = "untrusted/video_preprocessor_config.json";

Status Parse(const std::string& text) { return ParseVideoProcessorConfig(text, kLabel).status(); }

// The error names the file and `key`.
void ExpectRefused(const std::string& text, const std::string& key,
                   StatusCode code = StatusCode::kInvalidArgument) {
  Status s = Parse(text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(kLabel), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(key), std::string::npos) << "want '" << key << "' in " << s.ToString();
}

TEST(VideoProcessorConfigTest, DefaultsAreTheClassDefaults) {
  // Qwen3VLVideoProcessor: size {"shortest_edge": 128*32*32, "longest_edge": 32*32*768}, fps 2,
  // 4 .. 768 frames, patch 16, temporal 2, merge 2, IMAGENET_STANDARD mean/std, rescale 1/255.
  const VideoProcessorConfig c;
  EXPECT_EQ(c.min_pixels, 131072);
  EXPECT_EQ(c.max_pixels, 786432);
  EXPECT_EQ(c.fps, 2.0);
  EXPECT_EQ(c.min_frames, 4);
  EXPECT_EQ(c.max_frames, 768);
  EXPECT_FALSE(c.num_frames.has_value());
  EXPECT_FALSE(c.cap_pixels_per_frame);
  EXPECT_EQ(c.factor(), 32);
  EXPECT_EQ(c.temporal_patch_size, 2);
  EXPECT_EQ(c.image_mean[0], 0.5f);
  EXPECT_EQ(c.image_std[2], 0.5f);
  EXPECT_DOUBLE_EQ(c.rescale_factor, 1.0 / 255);
  EXPECT_TRUE(c.do_resize && c.do_rescale && c.do_normalize && c.do_sample_frames);
  // An empty file keeps them all.
  auto e = ParseVideoProcessorConfig("{}", kLabel);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->min_pixels, 131072);
  EXPECT_EQ(e->max_pixels, 786432);
}

TEST(VideoProcessorConfigTest, ReadsQwen3Vl) {
  auto c = ParseVideoProcessorConfig(kQwen3Vl, kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 4096);
  EXPECT_EQ(c->max_pixels, 25165824);
  EXPECT_EQ(c->fps, 2.0);
  EXPECT_EQ(c->min_frames, 4);
  EXPECT_EQ(c->max_frames, 768);
  EXPECT_EQ(c->patch_size, 16);
  EXPECT_EQ(c->temporal_patch_size, 2);
  EXPECT_EQ(c->merge_size, 2);
  EXPECT_DOUBLE_EQ(c->rescale_factor, 1.0 / 255);
  EXPECT_TRUE(c->do_sample_frames);
}

TEST(VideoProcessorConfigTest, ReadsSamplingKeysAndNullsAsAbsent) {
  auto c = ParseVideoProcessorConfig(
      R"({"fps": 0.5, "min_frames": 2, "max_frames": 64, "num_frames": 16,
          "cap_pixels_per_frame": true, "do_sample_frames": false, "do_normalize": false,
          "image_mean": [0.48145466, 0.4578275, 0.40821073]})",
      kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fps, 0.5);
  EXPECT_EQ(c->min_frames, 2);
  EXPECT_EQ(c->max_frames, 64);
  ASSERT_TRUE(c->num_frames.has_value());
  EXPECT_EQ(*c->num_frames, 16);
  EXPECT_TRUE(c->cap_pixels_per_frame);
  EXPECT_FALSE(c->do_sample_frames);
  EXPECT_FALSE(c->do_normalize);
  EXPECT_EQ(c->image_mean[0], 0.48145466f);
  // transformers keeps the class default for a null.
  c = ParseVideoProcessorConfig(
      R"({"fps": null, "num_frames": null, "cap_pixels_per_frame": null, "size": null,
          "max_frames": null})",
      kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fps, 2.0);
  EXPECT_FALSE(c->num_frames.has_value());
  EXPECT_FALSE(c->cap_pixels_per_frame);
  EXPECT_EQ(c->max_pixels, 786432);
  EXPECT_EQ(c->max_frames, 768);
}

TEST(VideoProcessorConfigTest, TopLevelMinMaxPixelsAreIgnored) {
  // Qwen3VLVideoProcessor reads only `size` (Qwen2-VL's processors read these keys).
  auto c = ParseVideoProcessorConfig(R"({"min_pixels": 1, "max_pixels": 2})", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 131072);
  EXPECT_EQ(c->max_pixels, 786432);
}

TEST(VideoProcessorConfigTest, RefusesBadSize) {
  ExpectRefused(R"({"size": {"shortest_edge": 4096}})", "size must contain");
  ExpectRefused(R"({"size": {"longest_edge": 4096}})", "size must contain");
  ExpectRefused(R"({"size": {"height": 224, "width": 224}})", "size must contain");
  ExpectRefused(R"({"size": 4096})", "size");
  ExpectRefused(R"({"size": {"shortest_edge": 0, "longest_edge": 4096}})", "size.shortest_edge");
  ExpectRefused(R"({"size": {"shortest_edge": -1, "longest_edge": 4096}})", "size.shortest_edge");
  ExpectRefused(R"({"size": {"shortest_edge": 1, "longest_edge": 2147483649}})",
                "size.longest_edge");
  ExpectRefused(R"({"size": {"shortest_edge": 1.5, "longest_edge": 4096}})", "size.shortest_edge");
  ExpectRefused(R"({"size": {"shortest_edge": 8192, "longest_edge": 4096}})", "shortest_edge");
  // 2^31 itself is allowed.
  EXPECT_TRUE(Parse(R"({"size": {"shortest_edge": 1, "longest_edge": 2147483648}})").ok());
}

TEST(VideoProcessorConfigTest, RefusesBadSampling) {
  ExpectRefused(R"({"fps": 0})", "fps");
  ExpectRefused(R"({"fps": -2})", "fps");
  ExpectRefused(R"({"fps": 1000.5})", "fps");
  ExpectRefused(R"({"fps": "2"})", "fps");
  EXPECT_FALSE(Parse(R"({"fps": 1e400})").ok());  // beyond a double
  ExpectRefused(R"({"min_frames": 0})", "min_frames");
  ExpectRefused(R"({"max_frames": 6145})", "max_frames");
  ExpectRefused(R"({"max_frames": 2.5})", "max_frames");
  ExpectRefused(R"({"min_frames": 8, "max_frames": 4})", "min_frames");
  ExpectRefused(R"({"min_frames": 800})", "min_frames");  // above the default max_frames
  ExpectRefused(R"({"num_frames": 0})", "num_frames");
  ExpectRefused(R"({"num_frames": 100000})", "num_frames");
  ExpectRefused(R"({"num_frames": true})", "num_frames");
  ExpectRefused(R"({"cap_pixels_per_frame": 1})", "cap_pixels_per_frame");
  ExpectRefused(R"({"do_sample_frames": "yes"})", "do_sample_frames");
  EXPECT_TRUE(Parse(R"({"fps": 1000, "min_frames": 6144, "max_frames": 6144})").ok());
}

TEST(VideoProcessorConfigTest, RefusesBadPatchSizesMeanStdAndResample) {
  ExpectRefused(R"({"patch_size": 0})", "patch_size");
  ExpectRefused(R"({"temporal_patch_size": 17})", "temporal_patch_size");
  ExpectRefused(R"({"merge_size": -2})", "merge_size");
  ExpectRefused(R"({"image_mean": [0.5, 0.5]})", "image_mean");
  ExpectRefused(R"({"image_std": [0.5, 0, 0.5]})", "image_std[1]");
  ExpectRefused(R"({"image_mean": 0.5})", "image_mean");
  ExpectRefused(R"({"rescale_factor": 0})", "rescale_factor");
  ExpectRefused(R"({"resample": 2})", "resample", StatusCode::kUnimplemented);
  ExpectRefused(R"({"do_resize": 1})", "do_resize");
}

TEST(VideoProcessorConfigTest, RefusesMalformedJson) {
  EXPECT_EQ(Parse("").code(), StatusCode::kDataLoss);
  EXPECT_EQ(Parse("[1, 2]").code(), StatusCode::kDataLoss);
  EXPECT_EQ(Parse(R"({"fps": 2, "fps": 3})").code(), StatusCode::kDataLoss);
  EXPECT_EQ(Parse(std::string("{}\0{", 3)).code(), StatusCode::kDataLoss);
  std::string deep = "{\"x\": " + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_EQ(Parse(deep).code(), StatusCode::kDataLoss);
}

TEST(VideoProcessorConfigTest, ChecksAgainstTheVisionTower) {
  VisionConfig vision;  // patch 16, temporal 2, merge 2
  VideoProcessorConfig c;
  EXPECT_TRUE(CheckVideoConfigAgainstVision(c, vision).ok());
  c.temporal_patch_size = 1;
  Status s = CheckVideoConfigAgainstVision(c, vision);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("temporal_patch_size 1"), std::string::npos) << s.ToString();
  c = VideoProcessorConfig{};
  c.merge_size = 4;
  s = CheckVideoConfigAgainstVision(c, vision);
  EXPECT_NE(s.message().find("spatial_merge_size 2"), std::string::npos) << s.ToString();
  c = VideoProcessorConfig{};
  vision.patch_size = 14;
  s = CheckVideoConfigAgainstVision(c, vision);
  EXPECT_NE(s.message().find("patch_size 16"), std::string::npos) << s.ToString();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/vls_vpc_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(VideoProcessorConfigTest, LoadsFromAFolderOrFallsBackToDefaults) {
  TempDir dir;
  auto missing = LoadVideoProcessorConfig(dir.path());
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ(missing->max_pixels, 786432);  // the class default
  const std::string path = JoinPath(dir.path(), "video_preprocessor_config.json");
  ASSERT_TRUE(WriteStringToFile(path, kQwen3Vl).ok());
  auto c = LoadVideoProcessorConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_pixels, 25165824);
  ASSERT_TRUE(WriteStringToFile(path, "{\"fps\": -1}").ok());
  c = LoadVideoProcessorConfig(dir.path());
  EXPECT_NE(c.status().message().find(path + ": fps"), std::string::npos) << c.status().ToString();
  ASSERT_TRUE(
      WriteStringToFile(path, "{}" + std::string(kMaxVideoPreprocessorConfigBytes, ' ')).ok());
  c = LoadVideoProcessorConfig(dir.path());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << c.status().ToString();
  EXPECT_NE(c.status().message().find("kMaxVideoPreprocessorConfigBytes"), std::string::npos);
}

}  // namespace
}  // namespace vls
