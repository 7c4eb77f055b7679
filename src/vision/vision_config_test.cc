// vision_config parsing: the shipped shape, defaults, and every rule's refusal naming its key.
#include "vision/vision_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace vls {
namespace {

using Json = nlohmann::json;

Qwen3Config Text(int hidden, int deepstack_levels) {
  Qwen3Config t;
  t.hidden = hidden;
  if (deepstack_levels > 0) {
    DeepStackConfig ds;
    for (int k = 0; k < deepstack_levels; ++k) ds.target_layers.push_back(k);
    t.deepstack = ds;
  }
  return t;
}

// The Qwen3-VL-2B vision_config (docs/contracts.md §D.1).
Json Config2B() {
  Json v = {{"depth", 24},
            {"hidden_size", 1024},
            {"intermediate_size", 4096},
            {"num_heads", 16},
            {"hidden_act", "gelu_pytorch_tanh"},
            {"in_channels", 3},
            {"patch_size", 16},
            {"temporal_patch_size", 2},
            {"spatial_merge_size", 2},
            {"num_position_embeddings", 2304},
            {"out_hidden_size", 2048},
            {"deepstack_visual_indexes", {5, 11, 17}},
            {"model_type", "qwen3_vl"}};
  return {{"model_type", "qwen3_vl"}, {"vision_config", v}, {"text_config", Json::object()}};
}

StatusOr<std::optional<VisionConfig>> Parse(const Json& j, const Qwen3Config& text) {
  return ParseVisionConfig(j.dump(), "config.json", text);
}

TEST(VisionConfigTest, ParsesThe2BConfig) {
  auto c = Parse(Config2B(), Text(2048, 3));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.depth, 24);
  EXPECT_EQ(v.hidden, 1024);
  EXPECT_EQ(v.intermediate, 4096);
  EXPECT_EQ(v.heads, 16);
  EXPECT_EQ(v.head_dim(), 64);
  EXPECT_EQ(v.patch_dim(), 1536);
  EXPECT_EQ(v.pos_grid_side(), 48);
  EXPECT_EQ(v.merged_dim(), 4096);
  EXPECT_EQ(v.out_hidden, 2048);
  EXPECT_EQ(v.deepstack_visual_indexes, (std::vector<int>{5, 11, 17}));
  const std::string canon = CanonicalVisionConfigText(v);
  EXPECT_NE(canon.find("vision.deepstack_visual_indexes=5,11,17\n"), std::string::npos) << canon;
  Json other = Config2B();
  other["vision_config"]["deepstack_visual_indexes"] = {5, 11, 18};
  EXPECT_NE(CanonicalVisionConfigText(**Parse(other, Text(2048, 3))), canon);
}

TEST(VisionConfigTest, DefaultsAndAbsence) {
  Json j = Config2B();
  for (const char* k :
       {"in_channels", "patch_size", "temporal_patch_size", "spatial_merge_size", "hidden_act"}) {
    j["vision_config"].erase(k);
  }
  auto c = Parse(j, Text(2048, 3));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->patch_size, 16);
  EXPECT_EQ((*c)->temporal_patch_size, 2);
  EXPECT_EQ((*c)->spatial_merge_size, 2);
  // No vision tower: plain Qwen3, or qwen3_vl without vision_config.
  auto none = ParseVisionConfig(R"({"model_type":"qwen3","hidden_size":8})", "c", Text(8, 0));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  j.erase("vision_config");
  none = Parse(j, Text(2048, 0));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// Each case: one edit of the 2B config, the status code and a text the error must contain.
struct Bad {
  const char* key;
  Json value;
  StatusCode code;
  const char* contains;
};

TEST(VisionConfigTest, RefusesEachRuleNamingTheKey) {
  const Bad cases[] = {
      {"num_heads", 24, StatusCode::kInvalidArgument,
       "vision_config.num_heads: 24 does not divide"},
      {"num_heads", 512, StatusCode::kInvalidArgument, "must be divisible by 4"},
      {"hidden_act", "gelu", StatusCode::kUnimplemented, "vision_config.hidden_act"},
      {"in_channels", 4, StatusCode::kInvalidArgument, "vision_config.in_channels"},
      {"num_position_embeddings", 2300, StatusCode::kInvalidArgument, "not a perfect square"},
      {"out_hidden_size", 1024, StatusCode::kInvalidArgument, "differs from the text hidden_size"},
      {"deepstack_visual_indexes", {5, 11}, StatusCode::kInvalidArgument, "declares 3 DeepStack"},
      {"deepstack_visual_indexes", {5, 5, 17}, StatusCode::kInvalidArgument, "strictly increasing"},
      {"deepstack_visual_indexes",
       {5, 11, 24},
       StatusCode::kInvalidArgument,
       "vision_config.deepstack_visual_indexes"},
      {"deepstack_visual_indexes", "5", StatusCode::kInvalidArgument, "expected a list"},
      {"depth", 0, StatusCode::kInvalidArgument, "vision_config.depth"},
      {"depth", 2.5, StatusCode::kInvalidArgument, "vision_config.depth"},
      {"hidden_size", 1 << 20, StatusCode::kInvalidArgument, "vision_config.hidden_size"},
      {"intermediate_size", nullptr, StatusCode::kInvalidArgument, "intermediate_size: required"},
      {"spatial_merge_size", 64, StatusCode::kInvalidArgument, "kMaxWeightElements"},
      {"interpolation_mode", "bicubic", StatusCode::kUnimplemented, "interpolation_mode"},
      {"interpolation_align_corners", false, StatusCode::kUnimplemented, "align_corners"},
  };
  for (const Bad& b : cases) {
    Json j = Config2B();
    j["vision_config"][b.key] = b.value;
    auto c = Parse(j, Text(2048, 3));
    ASSERT_FALSE(c.ok()) << b.key << " = " << b.value.dump();
    EXPECT_EQ(c.status().code(), b.code) << c.status().ToString();
    EXPECT_NE(c.status().message().find(b.contains), std::string::npos)
        << b.key << ": " << c.status().ToString();
    EXPECT_EQ(c.status().message().rfind("config.json: ", 0), 0u) << c.status().ToString();
  }
  EXPECT_FALSE(ParseVisionConfig("{\"model_type\":\"qwen3_vl\",\"vision_config\":[]}",
                                 "config.json", Text(2048, 3))
                   .ok());
  EXPECT_FALSE(
      ParseVisionConfig(std::string("{\"a\":1}\0x", 9), "config.json", Text(2048, 3)).ok());
  // A text config without DeepStack and a vision config with indexes disagree.
  EXPECT_FALSE(Parse(Config2B(), Text(2048, 0)).ok());
}

TEST(VisionConfigTest, LoadReadsConfigJson) {
  auto missing = LoadVisionConfig("/nonexistent/vlstack", Text(2048, 3));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
}

}  // namespace
}  // namespace vls
