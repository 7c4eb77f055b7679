#include "vision/image_processor_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/file.h"

namespace vls {
namespace {

// Qwen3-VL's shipped preprocessor_config.json.
constexpr char kQwen3Vl[] =
    R"({"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
        "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
        "image_processor_type": "Qwen2VLImageProcessorFast"})";

// Qwen2-VL's (the older key style, CLIP statistics, patch 14).
constexpr char kQwen2Vl[] =
    R"({"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"})";

constexpr char kLabel[] = "untrusted/preprocessor_config.json";

Status Parse(const std::string& text) { return ParseImageProcessorConfig(text, kLabel).status(); }

// The error names the file and `key`.
void ExpectRefused(const std::string& text, const std::string& key,
                   StatusCode code = StatusCode::kInvalidArgument) {
  Status s = Parse(text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(kLabel), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(key), std::string::npos) << "want '" << key << "' in " << s.ToString();
}

TEST(ImageProcessorConfigTest, ReadsQwen3Vl) {
  auto c = ParseImageProcessorConfig(kQwen3Vl, kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 65536);
  EXPECT_EQ(c->max_pixels, 16777216);
  EXPECT_EQ(c->patch_size, 16);
  EXPECT_EQ(c->temporal_patch_size, 2);
  EXPECT_EQ(c->merge_size, 2);
  EXPECT_EQ(c->factor(), 32);
  EXPECT_EQ(c->image_mean[1], 0.5f);
  EXPECT_EQ(c->image_std[2], 0.5f);
  EXPECT_DOUBLE_EQ(c->rescale_factor, 1.0 / 255);
  EXPECT_TRUE(c->do_resize && c->do_rescale && c->do_normalize && c->do_convert_rgb);
}

TEST(ImageProcessorConfigTest, ReadsQwen2VlKeyStyle) {
  auto c = ParseImageProcessorConfig(kQwen2Vl, kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 3136);
  EXPECT_EQ(c->max_pixels, 12845056);
  EXPECT_EQ(c->patch_size, 14);
  EXPECT_EQ(c->factor(), 28);
  EXPECT_EQ(c->image_mean[0], 0.48145466f);
  EXPECT_EQ(c->image_std[2], 0.27577711f);
}

TEST(ImageProcessorConfigTest, TopLevelPixelsOverrideSize) {
  // transformers: min_pixels / max_pixels given at the top replace size's entries.
  auto c = ParseImageProcessorConfig(
      R"({"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "min_pixels": 1024,
          "max_pixels": 1048576})",
      kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 1024);
  EXPECT_EQ(c->max_pixels, 1048576);
  // One at a time.
  c = ParseImageProcessorConfig(
      R"({"size": {"shortest_edge": 4096, "longest_edge": 16777216}, "max_pixels": 65536})",
      kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 4096);
  EXPECT_EQ(c->max_pixels, 65536);
  // A size lacking an entry the top level supplies is complete.
  c = ParseImageProcessorConfig(R"({"size": {"longest_edge": 9000}, "min_pixels": 100})", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_pixels, 100);
  EXPECT_EQ(c->max_pixels, 9000);
}

TEST(ImageProcessorConfigTest, AbsentKeysKeepQwen3VlDefaultsAndUnknownKeysAreIgnored) {
  auto c = ParseImageProcessorConfig(
      R"({"do_pad": true, "crop_size": null, "resample": 3, "processor_class": "X",
          "image_mean": null, "some_future_key": {"nested": [1, 2, 3]}})",
      kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ImageProcessorConfig d;
  EXPECT_EQ(c->min_pixels, d.min_pixels);
  EXPECT_EQ(c->max_pixels, d.max_pixels);
  EXPECT_EQ(c->patch_size, d.patch_size);
  EXPECT_EQ(c->image_mean, d.image_mean);
}

TEST(ImageProcessorConfigTest, ReadsFlagsAndRescaleFactor) {
  auto c = ParseImageProcessorConfig(
      R"({"do_resize": false, "do_rescale": false, "do_normalize": false,
          "do_convert_rgb": false, "rescale_factor": 0.5})",
      kLabel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->do_resize || c->do_rescale || c->do_normalize || c->do_convert_rgb);
  EXPECT_EQ(c->rescale_factor, 0.5);
}

TEST(ImageProcessorConfigTest, RefusesIncompleteSize) {
  ExpectRefused(R"({"size": {"shortest_edge": 65536}})", "longest_edge");
  ExpectRefused(R"({"size": {"longest_edge": 65536}, "max_pixels": 70000})", "shortest_edge");
  ExpectRefused(R"({"size": {"height": 224, "width": 224}})", "size");
  ExpectRefused(R"({"size": 224})", "size");
  ExpectRefused(R"({"size": [65536, 16777216]})", "size");
}

TEST(ImageProcessorConfigTest, RefusesBadPixelLimits) {
  ExpectRefused(R"({"min_pixels": 0})", "min_pixels");
  ExpectRefused(R"({"max_pixels": -5})", "max_pixels");
  ExpectRefused(R"({"size": {"shortest_edge": 0, "longest_edge": 10}})", "size.shortest_edge");
  ExpectRefused(R"({"size": {"shortest_edge": 1, "longest_edge": 1e3}})", "size.longest_edge");
  ExpectRefused(R"({"min_pixels": 2000, "max_pixels": 1000})", "max_pixels");
  ExpectRefused(R"({"max_pixels": 1000})", "max_pixels");  // below the default minimum
  ExpectRefused(R"({"max_pixels": 1180591620717411303424})", "max_pixels");  // 2^70
  ExpectRefused(R"({"max_pixels": 268435457})", "max_pixels");               // 2^28 + 1
  ExpectRefused(R"({"min_pixels": "65536"})", "min_pixels");
  ExpectRefused(R"({"min_pixels": 65536.5})", "min_pixels");
  ExpectRefused(R"({"min_pixels": true})", "min_pixels");
}

TEST(ImageProcessorConfigTest, RefusesBadPatchSizes) {
  ExpectRefused(R"({"patch_size": 0})", "patch_size");
  ExpectRefused(R"({"patch_size": 257})", "patch_size");
  ExpectRefused(R"({"patch_size": 9223372036854775807})", "patch_size");
  ExpectRefused(R"({"temporal_patch_size": 0})", "temporal_patch_size");
  ExpectRefused(R"({"temporal_patch_size": 17})", "temporal_patch_size");
  ExpectRefused(R"({"merge_size": -2})", "merge_size");
  ExpectRefused(R"({"merge_size": 2.0})", "merge_size");
  ExpectRefused(R"({"merge_size": [2]})", "merge_size");
}

TEST(ImageProcessorConfigTest, RefusesBadMeanAndStd) {
  ExpectRefused(R"({"image_mean": [0.5, 0.5]})", "image_mean");
  ExpectRefused(R"({"image_mean": [0.5, 0.5, 0.5, 0.5]})", "image_mean");
  ExpectRefused(R"({"image_mean": 0.5})", "image_mean");
  ExpectRefused(R"({"image_mean": [0.5, "0.5", 0.5]})", "image_mean[1]");
  ExpectRefused(R"({"image_mean": [0.5, 0.5, 1e30]})", "image_mean[2]");
  ExpectRefused(R"({"image_mean": [0.5, 0.5, 1e400]})", "1e400", StatusCode::kDataLoss);
  ExpectRefused(R"({"image_mean": [0.5, null, 0.5]})", "image_mean[1]");
  ExpectRefused(R"({"image_std": [0.5, 0, 0.5]})", "image_std[1]");
  ExpectRefused(R"({"image_std": [0.5, 0.5, 1e-30]})", "image_std[2]");
  ExpectRefused(R"({"image_std": [1e7, 0.5, 0.5]})", "image_std[0]");
  ExpectRefused(R"({"rescale_factor": 0})", "rescale_factor");
  ExpectRefused(R"({"rescale_factor": -0.00392156862745098})", "rescale_factor");
  ExpectRefused(R"({"rescale_factor": "1/255"})", "rescale_factor");
  // A negative std is what the file says: allowed (transformers divides by it).
  EXPECT_TRUE(Parse(R"({"image_std": [-0.5, 0.5, 0.5]})").ok());
}

TEST(ImageProcessorConfigTest, RefusesResampleOtherThanBicubic) {
  EXPECT_TRUE(Parse(R"({"resample": 3})").ok());
  ExpectRefused(R"({"resample": 2})", "resample", StatusCode::kUnimplemented);
  ExpectRefused(R"({"resample": 0})", "resample", StatusCode::kUnimplemented);
  ExpectRefused(R"({"resample": "bicubic"})", "resample");
  ExpectRefused(R"({"resample": 3.5})", "resample");
}

TEST(ImageProcessorConfigTest, RefusesBadFlags) {
  ExpectRefused(R"({"do_resize": 1})", "do_resize");
  ExpectRefused(R"({"do_normalize": "true"})", "do_normalize");
  ExpectRefused(R"({"do_rescale": []})", "do_rescale");
  ExpectRefused(R"({"do_convert_rgb": 0})", "do_convert_rgb");
}

TEST(ImageProcessorConfigTest, RefusesMalformedJson) {
  for (const char* text : {"", "[]", "null", "3", "\"x\"", "{", "{\"patch_size\": 16,}",
                           "{\"patch_size\": 16}{}", "{\"patch_size\": 16} x"}) {
    Status s = Parse(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << text << ": " << s.ToString();
    EXPECT_NE(s.message().find(kLabel), std::string::npos) << s.ToString();
  }
  // A NUL byte inside and duplicate keys (which a lenient parser would silently resolve).
  Status nul = Parse(std::string("{\"patch_size\": 16}\0{}", 21));
  EXPECT_EQ(nul.code(), StatusCode::kDataLoss) << nul.ToString();
  Status dup = Parse(R"({"patch_size": 16, "patch_size": 14})");
  EXPECT_EQ(dup.code(), StatusCode::kDataLoss) << dup.ToString();
  EXPECT_NE(dup.message().find("patch_size"), std::string::npos) << dup.ToString();
  Status dup_size =
      Parse(R"({"size": {"shortest_edge": 1, "shortest_edge": 2, "longest_edge": 3}})");
  EXPECT_EQ(dup_size.code(), StatusCode::kDataLoss) << dup_size.ToString();
  // Deep nesting in an ignored key is still bounded by the parser.
  std::string deep = "{\"x\": " + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_EQ(Parse(deep).code(), StatusCode::kDataLoss);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/vls_ipc_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ImageProcessorConfigTest, LoadsFromAFolder) {
  TempDir dir;
  auto missing = LoadImageProcessorConfig(dir.path());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir.path(), "preprocessor_config.json"), kQwen2Vl).ok());
  auto c = LoadImageProcessorConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->patch_size, 14);
  // Errors name the file's path.
  ASSERT_TRUE(
      WriteStringToFile(JoinPath(dir.path(), "preprocessor_config.json"), "{\"patch_size\": 0}")
          .ok());
  c = LoadImageProcessorConfig(dir.path());
  EXPECT_NE(c.status().message().find(dir.path() + "/preprocessor_config.json: patch_size"),
            std::string::npos)
      << c.status().ToString();
  // Over the size bound (spaces are valid JSON, so only the bound refuses it).
  std::string big = "{}" + std::string(kMaxPreprocessorConfigBytes, ' ');
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir.path(), "preprocessor_config.json"), big).ok());
  c = LoadImageProcessorConfig(dir.path());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << c.status().ToString();
  EXPECT_NE(c.status().message().find("kMaxPreprocessorConfigBytes"), std::string::npos);
}

}  // namespace
}  // namespace vls
