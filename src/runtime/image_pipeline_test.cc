// Images through the request pipeline: a chat with image parts becomes a DeepStack request
// (pads expanded, rows placed, positions from get_rope_index), the encoder cache encodes a
// picture once across turns, and everything that would drop or invent an image is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "base/file.h"
#include "model/test_checkpoint.h"
#include "runtime/chat_pipeline.h"
#include "runtime/image_encoder.h"
#include "runtime/image_prompt.h"
#include "runtime/media_source.h"
#include "runtime/pipeline_test_util.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kVocab = 512;
constexpr int32_t kImagePad = kVocab - 4;
constexpr int32_t kVisionStart = kVocab - 6;
constexpr int32_t kVisionEnd = kVocab - 5;
constexpr int32_t kVideoPad = kVocab - 7;

// The tiny ChatML template with Qwen3-VL's image and video parts.
constexpr const char* kVisionTemplate =
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.content is string %}{{ m.content }}{%- else %}{%- for c in m.content %}"
    "{%- if c.type == 'image' or 'image' in c or 'image_url' in c %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif c.type == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in c %}{{ c.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{ '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";

std::string Fixture(const std::string& name) {
  return JoinPath(VLS_SOURCE_DIR "/tests/image/fixtures", name);
}

std::string DataUrl(const std::string& path) {
  const std::string bytes = ReadFileToString(path).value();
  return "data:image/png;base64," +
         EncodeBase64({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

class ImagePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = JoinPath("/tmp", "vls_image_pipeline_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    TestModelSpec spec;
    spec.vocab = kVocab;
    spec.tied = false;
    spec.dtype = DType::kF32;
    spec.deepstack = 2;
    spec.seed = 9;
    ASSERT_TRUE(WriteTestCheckpoint(dir_, spec, false).ok());
    ASSERT_TRUE(
        WriteStringToFile(JoinPath(dir_, "tokenizer.json"), testing::TinyChatTokenizerJson(kVocab))
            .ok());
    Json tc = {{"eos_token", "<|im_end|>"}, {"chat_template", kVisionTemplate}};
    ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, "tokenizer_config.json"), tc.dump()).ok());
    LoadOptions o;
    o.capacity = 512;
    o.threads = 2;
    auto lm = LoadedModel::Load(dir_, o);
    ASSERT_TRUE(lm.ok()) << lm.status().ToString();
    model_ = std::move(*lm);
    Reopen(ImageEncoderOptions{});
  }
  void TearDown() override {
    pipeline_.reset();
    encoder_.reset();
    model_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Reopen(const ImageEncoderOptions& eo) {
    pipeline_.reset();
    auto e = ImageEncoder::Load(dir_, *model_, eo);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    encoder_ = std::move(*e);
    ChatPipelineOptions po;
    po.images = encoder_.get();
    auto p = ChatPipeline::Load(dir_, *model_, po);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pipeline_ = std::move(*p);
  }
  static ChatRequest WithParts(Json parts) {
    ChatRequest r;
    r.messages = Json::array({{{"role", "user"}, {"content", std::move(parts)}}});
    return r;
  }
  static Json Image(const std::string& url) { return Json{{"type", "image"}, {"image", url}}; }
  static Json Text(const std::string& t) { return Json{{"type", "text"}, {"text", t}}; }

  std::string dir_;
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<ImageEncoder> encoder_;
  std::unique_ptr<ChatPipeline> pipeline_;
};

TEST_F(ImagePipelineTest, AnImagePartBecomesADeepStackRequest) {
  // png_rgb.png is 37 x 23: smart_resize -> 32 x 32 is below min_pixels 4096 -> 64 x 64.
  auto chat = pipeline_->Prepare(WithParts({Image(DataUrl(Fixture("png_rgb.png"))), Text("hi")}));
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const GenerationRequest& r = *chat->request;
  ASSERT_EQ(chat->images.grids.size(), 1u);
  const GridThw g = chat->images.grids[0];
  const int64_t n = MergedTokens(g, 2);
  EXPECT_EQ(n, chat->images.tokens);
  EXPECT_EQ(std::count(r.tokens.begin(), r.tokens.end(), kImagePad), n);
  const auto start = std::find(r.tokens.begin(), r.tokens.end(), kVisionStart) - r.tokens.begin();
  EXPECT_EQ(r.tokens[static_cast<size_t>(start + 1 + n)], kVisionEnd);
  ASSERT_TRUE(r.deepstack.has_value());
  EXPECT_EQ(r.deepstack->num_layers(), 2);
  EXPECT_EQ(r.deepstack->num_visual(), n);
  EXPECT_EQ(r.deepstack->positions()[0], start + 1);
  // The visual rows are the merger's, not the pad token's embedding.
  const int64_t H = model_->config().hidden;
  EXPECT_TRUE(std::equal(chat->images.embeds.begin(), chat->images.embeds.begin() + H,
                         r.embeddings.begin() + (start + 1) * H));
  // get_rope_index: the image spans max(h, w) / 2 positions for its n tokens.
  EXPECT_EQ(r.rope_delta, static_cast<int32_t>(std::max(g.h, g.w) / 2 - n));
  EXPECT_EQ(r.positions.mode, PositionMode::kMrope);
}

TEST_F(ImagePipelineTest, TheEncoderCacheEncodesAPictureOnceAcrossTurns) {
  const std::string url = DataUrl(Fixture("png_rgb.png"));
  ChatRequest turn1 = WithParts({Image(url), Text("what is it?")});
  auto a = pipeline_->Prepare(turn1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ChatRequest turn2 = turn1;
  turn2.messages.push_back({{"role", "assistant"}, {"content", "a picture"}});
  turn2.messages.push_back({{"role", "user"}, {"content", "and its colour?"}});
  auto b = pipeline_->Prepare(turn2);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ImageEncoder::Stats s = encoder_->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(a->images.embeds, b->images.embeds);
  // The second turn's prompt starts with the first's rows: the batch engine reuses its prefix.
  EXPECT_TRUE(std::equal(a->request->embeddings.begin(), a->request->embeddings.end() - 64 * 3,
                         b->request->embeddings.begin()));
  // Another picture is a miss; a budget smaller than one image caches nothing.
  ASSERT_TRUE(pipeline_->Prepare(WithParts({Image(DataUrl(Fixture("png_grey.png")))})).ok());
  EXPECT_EQ(encoder_->stats().misses, 2u);
  EXPECT_EQ(encoder_->stats().entries, 2u);
  ImageEncoderOptions tiny;
  tiny.cache_bytes = 16;
  Reopen(tiny);
  ASSERT_TRUE(pipeline_->Prepare(turn1).ok());
  ASSERT_TRUE(pipeline_->Prepare(turn1).ok());
  EXPECT_EQ(encoder_->stats().misses, 2u);
  EXPECT_EQ(encoder_->stats().entries, 0u);
}

TEST_F(ImagePipelineTest, TwoImagesKeepTheirOrder) {
  const std::string a = DataUrl(Fixture("png_rgb.png")), b = DataUrl(Fixture("png_grey.png"));
  auto ab = pipeline_->Prepare(WithParts({Image(a), Text("and"), Image(b)}));
  auto ba = pipeline_->Prepare(WithParts({Image(b), Text("and"), Image(a)}));
  ASSERT_TRUE(ab.ok() && ba.ok());
  ASSERT_EQ(ab->images.grids.size(), 2u);
  EXPECT_EQ(ab->images.grids[0], ba->images.grids[1]);
  EXPECT_NE(ab->request->embeddings, ba->request->embeddings);
}

TEST_F(ImagePipelineTest, WhatWouldDropOrInventAnImageIsRefused) {
  const std::string url = DataUrl(Fixture("png_rgb.png"));
  struct Case {
    Json parts;
    StatusCode code;
    const char* needle;
  } cases[] = {
      {Json::array({Json{{"type", "video"}, {"video", "v.mp4"}}}), StatusCode::kInvalidArgument,
       "video 'v.mp4': file paths are not accepted"},
      {Json::array({Text("<|vision_start|><|image_pad|><|vision_end|> what?")}),
       StatusCode::kInvalidArgument, "no image"},
      {Json::array({Image(url), Text("<|vision_start|><|image_pad|><|vision_end|>")}),
       StatusCode::kInvalidArgument, "2 image pad tokens but 1 image"},
      {Json::array({Text("look: "), Image("data:image/png;base64,iVBORw0KGgo=")}),
       StatusCode::kDataLoss, "messages[0].content[1]: data URL (image/png, 8 bytes): PNG"},
      {Json::array({Image("https://example.com/cat.png")}), StatusCode::kInvalidArgument,
       "remote URLs"},
      {Json::array({Image("/etc/passwd")}), StatusCode::kInvalidArgument, "file paths"},
  };
  for (const Case& c : cases) {
    auto r = pipeline_->Prepare(WithParts(c.parts));
    ASSERT_FALSE(r.ok()) << c.parts.dump();
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().ToString();
  }
  // A template that drops image parts: the image would be lost, so the request is refused.
  ASSERT_TRUE(
      WriteStringToFile(
          JoinPath(dir_, "tokenizer_config.json"),
          Json{{"eos_token", "<|im_end|>"}, {"chat_template", testing::kTinyChatTemplate}}.dump())
          .ok());
  Reopen(ImageEncoderOptions{});
  auto r = pipeline_->Prepare(WithParts({Image(url), Text("hi")}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("0 image pad tokens but 1 image"), std::string::npos)
      << r.status().ToString();
}

TEST(ImagePrompt, ExpandsPadsAndRefusesMismatches) {
  Qwen3Config cfg;
  cfg.image_token_id = kImagePad;
  cfg.video_token_id = kVideoPad;
  cfg.vision_start_token_id = kVisionStart;
  cfg.spatial_merge_size = 2;
  const std::vector<GridThw> grids = {{1, 4, 6}, {1, 2, 2}};
  const std::vector<int32_t> ids = {1, kVisionStart, kImagePad, kVisionEnd,
                                    2, kVisionStart, kImagePad, kVisionEnd};
  auto e = ExpandImagePads(cfg, ids, grids);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size(), ids.size() + 5 + 0);
  EXPECT_EQ(std::count(e->begin(), e->end(), kImagePad), 7);
  EXPECT_FALSE(ExpandImagePads(cfg, ids, std::vector<GridThw>{{1, 4, 6}}).ok());
  const std::vector<int32_t> orphan = {1, kImagePad};
  EXPECT_NE(ExpandImagePads(cfg, orphan, std::vector<GridThw>{{1, 2, 2}})
                .status()
                .message()
                .find("does not follow vision_start"),
            std::string::npos);
  const std::vector<int32_t> video = {kVisionStart, kVideoPad};
  EXPECT_NE(ExpandImagePads(cfg, video, {})
                .status()
                .message()
                .find("0 image and 1 video pad tokens but 0 images and 0 video temporal groups"),
            std::string::npos);
  EXPECT_FALSE(ExpandImagePads(cfg, ids, std::vector<GridThw>{{1, 3, 6}, {1, 2, 2}}).ok());
}

}  // namespace
}  // namespace vls
