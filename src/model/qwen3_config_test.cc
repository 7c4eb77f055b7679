#include "model/qwen3_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"

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

// LoadQwen3Config on a folder of this process's own (removed when the test ends).
class LoadQwen3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "vls_config_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Write(const std::string& name, const Json& j) {
    ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, name), j.dump()).ok()) << name;
  }
  // The eos ids LoadQwen3Config reads with `generation` as generation_config.json (none when
  // null).
  std::vector<int> Eos(const Json& config, const Json& generation) {
    Write("config.json", config);
    std::filesystem::remove(JoinPath(dir_, "generation_config.json"));
    if (!generation.is_null()) Write("generation_config.json", generation);
    auto c = LoadQwen3Config(dir_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->eos_token_ids : std::vector<int>{};
  }
  std::string dir_;
};

// The Qwen3-VL files: text_config's 151645 (<|im_end|>) and generation_config's [151645,
// 151643]; generation stops on both, as transformers' generate() does.
TEST_F(LoadQwen3ConfigTest, Qwen3VlStopsOnGenerationConfigsIds) {
  Json config = VlConfig();
  config["text_config"]["vocab_size"] = 151936;
  config["text_config"]["eos_token_id"] = 151645;
  EXPECT_EQ(Eos(config, Json{{"eos_token_id", {151645, 151643}}}),
            (std::vector<int>{151645, 151643}));
  EXPECT_EQ(Eos(config, Json{{"eos_token_id", {151643, 151645}}}),
            (std::vector<int>{151643, 151645}));
}

// An eos id of config.json that generation_config.json leaves out still ends a sequence: the
// union, generation_config's first (a replacement would run past config.json's eos).
TEST_F(LoadQwen3ConfigTest, EosIdsAreTheUnionOfBothFiles) {
  const Json config = VlConfig();  // text_config eos 511
  EXPECT_EQ(Eos(config, Json{{"eos_token_id", {509, 510}}}), (std::vector<int>{509, 510, 511}));
  EXPECT_EQ(Eos(config, Json{{"eos_token_id", 508}}), (std::vector<int>{508, 511}));
  EXPECT_EQ(Eos(config, Json{{"eos_token_id", {511, 509}}}), (std::vector<int>{511, 509}));
  // Without the file, or without the key (or null): config.json's alone.
  EXPECT_EQ(Eos(config, nullptr), (std::vector<int>{511}));
  EXPECT_EQ(Eos(config, Json{{"temperature", 0.7}}), (std::vector<int>{511}));
  EXPECT_EQ(Eos(config, Json{{"eos_token_id", nullptr}}), (std::vector<int>{511}));
  // config.json's top level and text_config join the same way.
  Json both = VlConfig();
  both["eos_token_id"] = 510;
  EXPECT_EQ(Eos(both, nullptr), (std::vector<int>{510, 511}));
  EXPECT_EQ(Eos(both, Json{{"eos_token_id", {509}}}), (std::vector<int>{509, 510, 511}));
  // A config without eos ids takes generation_config's.
  Json none = VlConfig();
  none["text_config"].erase("eos_token_id");
  EXPECT_EQ(Eos(none, Json{{"eos_token_id", {509}}}), (std::vector<int>{509}));
}

TEST_F(LoadQwen3ConfigTest, EosIdsOutsideTheVocabularyNameTheirFile) {
  Write("config.json", VlConfig());
  Write("generation_config.json", Json{{"eos_token_id", {511, 512}}});
  auto c = LoadQwen3Config(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("generation_config.json: eos_token_id 512"),
            std::string::npos)
      << c.status().message();
  Write("generation_config.json", Json{{"eos_token_id", "end"}});
  c = LoadQwen3Config(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("eos_token_id"), std::string::npos) << c.status().message();
  Json config = VlConfig();
  config["text_config"]["eos_token_id"] = 600;
  Write("config.json", config);
  std::filesystem::remove(JoinPath(dir_, "generation_config.json"));
  c = LoadQwen3Config(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("config.json: eos_token_id 600"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace vls
