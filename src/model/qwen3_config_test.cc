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

// --- Hostile config.json (issue 15): every case is refused with an error naming the key, never
// a crash, a wrapped value or an allocation sized from the file. -----------------------------

void ExpectTextError(const std::string& text, const std::string& needle) {
  auto c = ParseQwen3Config(text, "config.json");
  ASSERT_FALSE(c.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(Qwen3ConfigHostileTest, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = std::string(200000, '[') + "1" + std::string(200000, ']');
  const std::string good = VlConfig().dump();
  ExpectTextError(good.substr(0, good.size() - 1) + ", \"x\": " + deep + "}", "nests deeper");
  ExpectTextError(deep, "nests deeper");
}

TEST(Qwen3ConfigHostileTest, TrailingBytesAfterNulAreRefused) {
  std::string text = VlConfig().dump();
  ASSERT_TRUE(ParseQwen3Config(text, "config.json").ok());
  text += std::string("\0garbage", 8);
  ExpectTextError(text, "NUL byte");
  ExpectTextError(VlConfig().dump() + " {}", "config.json");
}

TEST(Qwen3ConfigHostileTest, DuplicateKeysAreRefused) {
  const std::string good = VlConfig().dump();
  ExpectTextError(good.substr(0, good.size() - 1) + ", \"image_token_id\": 7}", "appears twice");
}

TEST(Qwen3ConfigHostileTest, NoSilentCoercion) {
  for (const Json& bad : {Json(4294967297LL), Json(2.7), Json(true), Json("64"), Json(-64),
                          Json::array({64}), Json::object()}) {
    Json j = VlConfig();
    j["text_config"]["hidden_size"] = bad;
    ExpectError(j, "text_config.hidden_size");
  }
  Json j = VlConfig();
  j["image_token_id"] = 4294967797LL;  // 2^32 + 501: wraps to 501 in get<int>()
  ExpectError(j, "image_token_id");
  j = VlConfig();
  j["text_config"]["rope_scaling"]["mrope_interleaved"] = 1;
  ExpectError(j, "mrope_interleaved");
  j = VlConfig();
  j["tie_word_embeddings"] = "true";
  j["text_config"]["tie_word_embeddings"] = "true";
  ExpectError(j, "tie_word_embeddings");
  j = VlConfig();
  j["text_config"]["rope_scaling"]["rope_type"] = 5;
  ExpectError(j, "rope_type");
  j = VlConfig();
  j["model_type"] = 5;
  ExpectError(j, "model_type");
  j = VlConfig();
  j["text_config"]["rms_norm_eps"] = "1e-6";
  ExpectError(j, "rms_norm_eps");
  j = VlConfig();
  j["text_config"]["rope_theta"] = -1;
  ExpectError(j, "rope_theta");
  j = VlConfig();
  j["text_config"]["eos_token_id"] = {511, 2.5};
  ExpectError(j, "eos_token_id");
}

TEST(Qwen3ConfigHostileTest, SpecialTokenIdsMustBeDistinctAndInVocabulary) {
  Json j = VlConfig();
  j["video_token_id"] = 500;  // == image_token_id
  ExpectError(j, "video_token_id 500 is also image_token_id");
  j = VlConfig();
  j["vision_end_token_id"] = 502;  // == vision_start_token_id
  ExpectError(j, "vision_end_token_id");
  j = VlConfig();
  j["image_token_id"] = 511;  // == eos
  ExpectError(j, "image_token_id 511 is also an eos_token_id");
  j = VlConfig();
  j["bos_token_id"] = 503;
  ExpectError(j, "bos_token_id");
  j = VlConfig();
  j["bos_token_id"] = 512;
  ExpectError(j, "bos_token_id 512 is outside the vocabulary of 512");
  j = VlConfig();
  j["text_config"]["eos_token_id"] = 512;
  ExpectError(j, "eos_token_id 512 is outside the vocabulary");
  j = VlConfig();
  j["image_token_id"] = -1;
  ExpectError(j, "image_token_id");
  // bos may be an eos id (Qwen's <|endoftext|> is both).
  j = VlConfig();
  j["bos_token_id"] = 511;
  EXPECT_TRUE(Parse(j).ok());
  // Too many eos ids.
  j = VlConfig();
  j["text_config"]["eos_token_id"] = Json::array();
  for (int i = 0; i < kMaxEosTokenIds + 1; ++i) j["text_config"]["eos_token_id"].push_back(i);
  ExpectError(j, "at most 64");
}

TEST(Qwen3ConfigHostileTest, SizesAreBoundedBeforeUse) {
  struct Case {
    const char* key;
    int64_t value;
    const char* needle;
  };
  const Case cases[] = {
      {"hidden_size", int64_t{kMaxHiddenSize} + 1, "text_config.hidden_size"},
      {"intermediate_size", int64_t{kMaxIntermediateSize} + 1, "text_config.intermediate_size"},
      {"num_hidden_layers", int64_t{kMaxHiddenLayers} + 1, "text_config.num_hidden_layers"},
      {"num_attention_heads", int64_t{kMaxAttentionHeads} + 1, "num_attention_heads"},
      {"num_key_value_heads", 0, "num_key_value_heads"},
      {"head_dim", int64_t{kMaxHeadDim} + 2, "text_config.head_dim"},
      {"vocab_size", int64_t{kMaxVocabSize} + 1, "text_config.vocab_size"},
      {"vocab_size", 0, "text_config.vocab_size"},
      {"max_position_embeddings", int64_t{kMaxContextPositions} + 1, "max_position_embeddings"},
  };
  for (const Case& c : cases) {
    Json j = VlConfig();
    j["text_config"][c.key] = c.value;
    auto r = Parse(j);
    ASSERT_FALSE(r.ok()) << c.key;
    // The error names the key, the bound and the value.
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::to_string(c.value)), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("an integer in ["), std::string::npos)
        << r.status().message();
  }
  // The attacker's case: an Nmax of 2^31-1 sized buffers; now refused by the config.
  Json j = VlConfig();
  j["deepstack_language_layer_indices"] = {0};
  j["deepstack_max_visual_positions"] = 2147483647;
  ExpectError(j, "deepstack_max_visual_positions must be an integer in [1, 4194304]");
  // Products: each factor within its bound but the embedding table over kMaxWeightElements.
  j = VlConfig();
  j["text_config"]["vocab_size"] = kMaxVocabSize;
  j["text_config"]["hidden_size"] = kMaxHiddenSize;
  j["vision_config"].erase("out_hidden_size");
  ExpectError(j, "vocab_size x hidden_size (embed_tokens) = 1099511627776 elements");
  j = VlConfig();
  j["text_config"]["num_hidden_layers"] = kMaxHiddenLayers;
  j["text_config"]["hidden_size"] = 1 << 15;
  j["text_config"]["intermediate_size"] = 1 << 18;
  j["vision_config"].erase("out_hidden_size");
  ExpectError(j, "kMaxModelParameters");
  // Vision sizes.
  j = VlConfig();
  j["vision_config"]["depth"] = 4294967297LL;
  ExpectError(j, "vision_config.depth");
  j = VlConfig();
  j["vision_config"]["patch_size"] = 1024;
  j["vision_config"]["hidden_size"] = 1 << 16;
  j["vision_config"]["in_channels"] = 16;
  ExpectError(j, "patch_embed");
  j = VlConfig();
  j["vision_config"]["depth"] = 10;
  j["vision_config"]["deepstack_visual_indexes"] = {5, 11, 17};
  ExpectError(j, "vision_config.deepstack_visual_indexes");
  j = VlConfig();
  j["vision_config"]["deepstack_visual_indexes"] = Json::array({0, 1, 2, 3, 4});
  ExpectError(j, "only 4 language layers");
}

// Mixture of experts (ADR 0027). The keys of a qwen3_vl_moe text_config / a qwen3_moe root.
Json MoeKeys() {
  return Json::parse(R"({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true})");
}

Json VlMoeConfig() {
  Json j = VlConfig();
  j["model_type"] = "qwen3_vl_moe";
  j["text_config"]["model_type"] = "qwen3_vl_moe_text";
  j["text_config"].update(MoeKeys());
  return j;
}

Json Qwen3MoeConfig() {
  Json j = VlConfig()["text_config"];
  j["model_type"] = "qwen3_moe";
  j.erase("rope_scaling");
  j.update(MoeKeys());
  return j;
}

TEST(Qwen3MoeConfigTest, ParsesBothModelTypes) {
  auto vl = Parse(VlMoeConfig());
  ASSERT_TRUE(vl.ok()) << vl.status().ToString();
  EXPECT_TRUE(vl->IsVisionLanguage());
  EXPECT_EQ(vl->position_mode, PositionMode::kMrope);
  EXPECT_EQ(vl->weight_prefix, "model.language_model.");
  ASSERT_TRUE(vl->moe.has_value());
  EXPECT_EQ(vl->moe->experts, 8);
  EXPECT_EQ(vl->moe->top_k, 2);
  EXPECT_EQ(vl->moe->expert_intermediate, 24);
  EXPECT_EQ(vl->moe->layout, MoeLayout::kFused);
  EXPECT_TRUE(vl->moe->norm_topk_prob);
  for (int l = 0; l < vl->layers; ++l) EXPECT_TRUE(vl->IsSparseLayer(l)) << l;

  auto t = Parse(Qwen3MoeConfig());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->IsVisionLanguage());
  EXPECT_EQ(t->weight_prefix, "model.");
  ASSERT_TRUE(t->moe.has_value());
  EXPECT_EQ(t->moe->layout, MoeLayout::kPerExpert);
  EXPECT_TRUE(t->moe->norm_topk_prob);

  // Dense models keep moe unset and no sparse layer.
  auto dense = Parse(VlConfig());
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(dense->moe.has_value());
  EXPECT_FALSE(dense->IsSparseLayer(0));
  EXPECT_TRUE(dense->IsVisionLanguage());
}

TEST(Qwen3MoeConfigTest, SparseLayersFollowTransformersRule) {
  // 4 layers, step 2 -> sparse 1 and 3; mlp_only_layers [3, 0, 3] -> {0, 3}: sparse 1 only.
  Json j = Qwen3MoeConfig();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3, 0, 3};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe->mlp_only_layers, (std::vector<int>{0, 3}));  // sorted, deduplicated
  EXPECT_FALSE(c->IsSparseLayer(0));
  EXPECT_TRUE(c->IsSparseLayer(1));
  EXPECT_FALSE(c->IsSparseLayer(2));
  EXPECT_FALSE(c->IsSparseLayer(3));
}

TEST(Qwen3MoeConfigTest, NormTopkDefaultsAreTransformers) {
  // Qwen3MoeConfig: norm_topk_prob defaults to false.
  Json j = Qwen3MoeConfig();
  j.erase("norm_topk_prob");
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->moe->norm_topk_prob);
  j["norm_topk_prob"] = false;
  c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->moe->norm_topk_prob);
  // Qwen3-VL-MoE always renormalises: absent is true, false is refused by name.
  j = VlMoeConfig();
  j["text_config"].erase("norm_topk_prob");
  c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->moe->norm_topk_prob);
  j["text_config"]["norm_topk_prob"] = false;
  ExpectError(j, "text_config.norm_topk_prob: false is not supported for qwen3_vl_moe");
}

TEST(Qwen3MoeConfigTest, CanonicalTextCarriesEveryMoeField) {
  auto base = Parse(Qwen3MoeConfig());
  ASSERT_TRUE(base.ok());
  const std::string text = CanonicalConfigText(*base);
  EXPECT_NE(text.find("moe=experts 8 top_k 2 intermediate 24 sparse_step 1 mlp_only_layers  "
                      "norm_topk_prob 1 layout per_expert"),
            std::string::npos)
      << text;
  auto dense = Parse(VlConfig());
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(CanonicalConfigText(*dense).find("moe="), std::string::npos);
  const std::pair<const char*, Json> changes[] = {
      {"num_experts", 16},        {"num_experts_per_tok", 1}, {"moe_intermediate_size", 32},
      {"decoder_sparse_step", 2}, {"mlp_only_layers", {1}},   {"norm_topk_prob", false}};
  for (const auto& [k, v] : changes) {
    Json j = Qwen3MoeConfig();
    j[k] = v;
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << k << ": " << c.status().ToString();
    EXPECT_NE(CanonicalConfigText(*c), text) << k;
  }
}

TEST(Qwen3MoeConfigHostileTest, RefusalsNameTheKey) {
  struct Case {
    const char* key;
    Json value;  // null: erase the key
    const char* needle;
  };
  const Case cases[] = {
      {"num_experts", 0, "num_experts must be an integer in [1, 4096], not 0"},
      {"num_experts", 1 << 20, "num_experts must be an integer in [1, 4096]"},
      {"num_experts", -3, "num_experts"},
      {"num_experts", nullptr, "num_experts: required key is missing"},
      {"num_experts_per_tok", 9, "num_experts_per_tok: 9 exceeds num_experts 8"},
      {"num_experts_per_tok", 0, "num_experts_per_tok must be an integer in [1,"},
      {"num_experts_per_tok", 2.5, "num_experts_per_tok"},
      {"num_experts_per_tok", nullptr, "num_experts_per_tok: required key is missing"},
      {"moe_intermediate_size", 0, "moe_intermediate_size must be an integer in [1, 262144]"},
      {"moe_intermediate_size", nullptr, "moe_intermediate_size: required key is missing"},
      {"decoder_sparse_step", 0, "decoder_sparse_step must be an integer in [1, 4], not 0"},
      {"decoder_sparse_step", -1, "decoder_sparse_step must be an integer in [1, 4]"},
      {"decoder_sparse_step", 5, "decoder_sparse_step must be an integer in [1, 4], not 5"},
      {"mlp_only_layers", {0, 4}, "mlp_only_layers must be an integer in [0, 3], not 4"},
      {"mlp_only_layers", {-1}, "mlp_only_layers must be an integer in [0, 3]"},
      {"mlp_only_layers", 2, "mlp_only_layers: expected a list"},
      {"norm_topk_prob", "yes", "norm_topk_prob"},
      {"shared_expert_intermediate_size", 5632, "shared_expert_intermediate_size: 5632"},
      {"routed_scaling_factor", 2.5, "routed_scaling_factor"},
      {"scoring_func", "sigmoid", "scoring_func"},
  };
  for (const Case& c : cases) {
    for (bool vl : {false, true}) {
      Json j = vl ? VlMoeConfig() : Qwen3MoeConfig();
      Json& t = vl ? j["text_config"] : j;
      if (c.value.is_null()) {
        t.erase(c.key);
      } else {
        t[c.key] = c.value;
      }
      SCOPED_TRACE(std::string(c.key) + (vl ? " (qwen3_vl_moe)" : " (qwen3_moe)"));
      ExpectError(j, (vl ? std::string("text_config.") : std::string()) + c.needle);
    }
  }
  // Training-only keys and neutral values of foreign keys are accepted.
  Json j = Qwen3MoeConfig();
  j["router_aux_loss_coef"] = 0.001;
  j["output_router_logits"] = true;
  j["shared_expert_intermediate_size"] = 0;
  j["routed_scaling_factor"] = 1.0;
  EXPECT_TRUE(Parse(j).ok());
  // num_experts_per_tok above kMaxExpertsPerToken while below num_experts.
  j = Qwen3MoeConfig();
  j["num_experts"] = 128;
  j["num_experts_per_tok"] = kMaxExpertsPerToken + 1;
  ExpectError(j, "kMaxExpertsPerToken");
}

TEST(Qwen3MoeConfigHostileTest, InconsistentTypesAreRefused) {
  // A dense model_type carrying experts.
  Json j = VlConfig();
  j["text_config"]["num_experts"] = 8;
  ExpectError(j, "text_config.num_experts: 8 experts, but model_type qwen3_vl is dense");
  j = VlConfig()["text_config"];
  j["model_type"] = "qwen3";
  j.erase("rope_scaling");
  j["num_experts"] = 128;
  ExpectError(j, "num_experts: 128 experts, but model_type qwen3 is dense");
  j["num_experts"] = 0;  // Qwen3's num_experts 0 builds no experts: fine
  EXPECT_TRUE(Parse(j).ok());
  // The text config of another architecture.
  j = VlMoeConfig();
  j["text_config"]["model_type"] = "qwen3_vl_text";
  ExpectError(j, "text_config.model_type: \"qwen3_vl_text\" contradicts model_type");
  j = VlConfig();
  j["text_config"]["model_type"] = "qwen3_vl_moe_text";
  ExpectError(j, "text_config.model_type");
  // qwen3_moe is 1-D; qwen3_vl_moe needs M-RoPE.
  j = Qwen3MoeConfig();
  j["rope_scaling"] = VlConfig()["text_config"]["rope_scaling"];
  ExpectError(j, "model_type qwen3_moe uses 1-D RoPE");
  j = VlMoeConfig();
  j["text_config"].erase("rope_scaling");
  ExpectError(j, "qwen3_vl_moe requires rope_scaling.mrope_section");
  // FP8 of the fused layout.
  j = VlMoeConfig();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  ExpectError(j, "FP8 checkpoints of the fused expert layout (qwen3_vl_moe) are not supported");
  j = Qwen3MoeConfig();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  EXPECT_TRUE(Parse(j).ok());
}

TEST(Qwen3MoeConfigHostileTest, ExpertSizesAreBoundedBeforeUse) {
  // The fused tensor [E, H, 2·I_e] over kMaxWeightElements.
  Json j = VlMoeConfig();
  j["text_config"]["num_experts"] = kMaxExperts;
  j["text_config"]["moe_intermediate_size"] = kMaxIntermediateSize;
  ExpectError(j, "(mlp.experts.gate_up_proj) = ");
  // Per expert each matrix fits, but E·3·H·I_e over all layers exceeds kMaxModelParameters.
  j = Qwen3MoeConfig();
  j["hidden_size"] = 1 << 14;
  j["num_experts"] = kMaxExperts;
  j["moe_intermediate_size"] = 1 << 16;
  ExpectError(j, "language-model parameters, over the bound");
  // The released 30B-A3B shape fits.
  j = Qwen3MoeConfig();
  j.update(Json{{"hidden_size", 2048},
                {"num_hidden_layers", 48},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 4},
                {"head_dim", 128},
                {"intermediate_size", 6144},
                {"vocab_size", 151936},
                {"num_experts", 128},
                {"num_experts_per_tok", 8},
                {"moe_intermediate_size", 768}});
  j.erase("eos_token_id");
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
}

TEST(Qwen3ConfigHostileTest, OversizedTextIsRefusedUnparsed) {
  std::string big = VlConfig().dump();
  big.insert(big.size() - 1, ", \"pad\": \"" + std::string(kMaxConfigJsonBytes, 'x') + "\"");
  ExpectTextError(big, "kMaxConfigJsonBytes");
}

TEST(Qwen3ConfigHostileTest, GenerationConfigIsParsedStrictly) {
  auto base = Parse(VlConfig());
  ASSERT_TRUE(base.ok());
  auto merge = [&](const std::string& text) {
    Qwen3Config c = *base;
    return MergeGenerationConfig(text, "generation_config.json", &c);
  };
  EXPECT_TRUE(merge(R"({"eos_token_id": [510, 511], "temperature": 0.7})").ok());
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}", "nests deeper"},
           {std::string("{\"eos_token_id\": 510}\0garbage", 29), "NUL byte"},
           {R"({"eos_token_id": 510, "eos_token_id": 509})", "appears twice"},
           {R"({"eos_token_id": 4294967807})", "eos_token_id"},
           {R"({"eos_token_id": true})", "eos_token_id"},
           {R"({"eos_token_id": [500]})", "is also an eos_token_id"},
           {R"({"eos_token_id": [512]})", "eos_token_id 512 is outside the vocabulary"},
           {R"([1])", "JSON object"},
       }) {
    Status s = merge(text);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("generation_config.json"), std::string::npos) << s.message();
  }
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

// Files are read only up to kMaxConfigJsonBytes: a larger (or endless) one is refused by size.
TEST_F(LoadQwen3ConfigTest, OversizedFilesAreRefused) {
  Write("config.json", VlConfig());
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, "generation_config.json"),
                                std::string(kMaxConfigJsonBytes + 1, ' '))
                  .ok());
  auto c = LoadQwen3Config(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("generation_config.json: larger than 16777216 bytes"),
            std::string::npos)
      << c.status().message();
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, "generation_config.json"),
                                std::string("{\"eos_token_id\": 510}\0x", 23))
                  .ok());
  c = LoadQwen3Config(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("NUL byte"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace vls
