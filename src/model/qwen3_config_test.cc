#include "model/qwen3_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace vls {
namespace {

using Json = nlohmann::json;

Json VlConfig() {
  return Json::parse(R"({
    "model_type": "qwen3_vl", "tie_word_embeddings": true,
    "image_token_id": 500, "video_token_id": 501, "vision_start_token_id": 502,
    "vision_end_token_id": 503,
    "text_config": {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
      "rms_norm_eps": 1e-6, "rope_theta": 5000000, "hidden_act": "silu", "eos_token_id": 511,
      "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": true}},
    "vision_config": {"deepstack_visual_indexes": [5, 11, 17], "spatial_merge_size": 2,
      "out_hidden_size": 64}
  })");
}

StatusOr<Qwen3Config> Parse(const Json& j) { return ParseQwen3Config(j.dump(), "config.json"); }

void ExpectError(const Json& j, const std::string& needle) {
  auto c = Parse(j);
  ASSERT_FALSE(c.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(Qwen3ConfigTest, ParsesQwen3VlWithDerivedDeepStack) {
  auto c = Parse(VlConfig());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden, 64);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->position_mode, PositionMode::kMrope);
  EXPECT_EQ(c->mrope_layout, MropeLayout::kInterleaved);
  EXPECT_TRUE(c->tied);
  EXPECT_EQ(c->weight_prefix, "model.language_model.");
  ASSERT_TRUE(c->deepstack.has_value());
  // Vision indexes 5/11/17 name ViT blocks; the language targets are 0,1,2.
  EXPECT_EQ(c->deepstack->target_layers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{511}));
}

TEST(Qwen3ConfigTest, ParsesPlainQwen3) {
  Json j = VlConfig()["text_config"];
  j["model_type"] = "qwen3";
  j.erase("rope_scaling");
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->position_mode, PositionMode::k1D);
  EXPECT_EQ(c->weight_prefix, "model.");
  EXPECT_FALSE(c->tied);
  EXPECT_FALSE(c->deepstack.has_value());
}

TEST(Qwen3ConfigTest, ChunkedLayoutWhenInterleavingIsOff) {
  Json j = VlConfig();
  j["text_config"]["rope_scaling"]["mrope_interleaved"] = false;
  EXPECT_EQ(Parse(j)->mrope_layout, MropeLayout::kChunked);
}

TEST(Qwen3ConfigTest, RejectsBrokenFilesNamingTheKey) {
  EXPECT_FALSE(ParseQwen3Config("{not json", "config.json").ok());
  EXPECT_FALSE(ParseQwen3Config("[1,2]", "config.json").ok());
  Json j = VlConfig();
  j["text_config"].erase("head_dim");
  ExpectError(j, "text_config.head_dim");
  j = VlConfig();
  j["text_config"]["num_key_value_heads"] = 3;
  ExpectError(j, "num_key_value_heads");
  j = VlConfig();
  j["text_config"]["rope_scaling"]["mrope_section"] = {4, 2, 1};
  ExpectError(j, "head_dim/2");
  j = VlConfig();
  j["text_config"]["rope_scaling"] = {{"rope_type", "mrope"}};
  ExpectError(j, "mrope_section");
  j = VlConfig();
  j["text_config"]["rope_scaling"]["rope_type"] = "yarn";
  ExpectError(j, "yarn");
  j = VlConfig();
  j["text_config"]["tie_word_embeddings"] = false;
  ExpectError(j, "contradicts");
  j = VlConfig();
  j["model_type"] = "llama";
  ExpectError(j, "llama");
  j = VlConfig();
  j["text_config"]["hidden_size"] = "64";
  ExpectError(j, "text_config.hidden_size");
  j = VlConfig();
  j["text_config"]["hidden_size"] = -1;
  ExpectError(j, "text_config.hidden_size");
  j = VlConfig();
  j["text_config"]["hidden_act"] = "gelu";
  ExpectError(j, "hidden_act");
  j = VlConfig();
  j["image_token_id"] = 100000;
  ExpectError(j, "outside the vocabulary");
  j = VlConfig();
  j["vision_config"]["out_hidden_size"] = 32;
  ExpectError(j, "out_hidden_size");
}

TEST(Qwen3ConfigTest, ExplicitDeepStackKeysAndTheirRules) {
  Json j = VlConfig();
  j["deepstack_language_layer_indices"] = {0, 2, 3};
  j["deepstack_max_visual_positions"] = 300;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->deepstack->target_layers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(c->deepstack->max_visual_positions, 300);
  // Capacity ordering: 300 is fine at 512 and refused at 256, but only once chosen.
  EXPECT_TRUE(ValidateDeepStackCapacity(*c->deepstack, 512).ok());
  Status s = ValidateDeepStackCapacity(*c->deepstack, 256);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exceeds selected context capacity 256"), std::string::npos);

  Json only_layers = VlConfig();
  only_layers["deepstack_language_layer_indices"] = {0};
  ExpectError(only_layers, "together");
  Json only_max = VlConfig();
  only_max["deepstack_max_visual_positions"] = 4;
  ExpectError(only_max, "together");
  for (const Json& bad : {Json::array({1, 1}), Json::array({2, 1}), Json::array({0, 4}),
                          Json::array(), Json::array({-1})}) {
    Json k = VlConfig();
    k["deepstack_language_layer_indices"] = bad;
    k["deepstack_max_visual_positions"] = 4;
    EXPECT_FALSE(Parse(k).ok()) << bad.dump();
  }
  Json zero = VlConfig();
  zero["deepstack_language_layer_indices"] = {0};
  zero["deepstack_max_visual_positions"] = 0;
  ExpectError(zero, "deepstack_max_visual_positions");
}

TEST(Qwen3ConfigTest, CanonicalTextDiffersWithDeepStack) {
  Json a = VlConfig(), b = VlConfig();
  b["deepstack_language_layer_indices"] = {0, 1};
  b["deepstack_max_visual_positions"] = 8;
  EXPECT_NE(CanonicalConfigText(*Parse(a)), CanonicalConfigText(*Parse(b)));
}

}  // namespace
}  // namespace vls
