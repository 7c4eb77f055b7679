// config.json's quantization_config (model/quantization_config.h): what is accepted, what is
// refused and how, through ParseQwen3Config as a model folder reaches it.
#include "model/quantization_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/qwen3_config.h"

namespace vls {
namespace {

using Json = nlohmann::json;

// A valid plain Qwen3 config.json (the 0.6B's sizes shrunk) with `quant` as its
// quantization_config (omitted when null).
std::string ConfigText(const Json& quant) {
  Json c = {{"model_type", "qwen3"},      {"hidden_size", 64},        {"num_hidden_layers", 2},
            {"num_attention_heads", 4},   {"num_key_value_heads", 2}, {"head_dim", 16},
            {"intermediate_size", 128},   {"vocab_size", 512},        {"rope_theta", 1000000.0},
            {"tie_word_embeddings", true}};
  if (!quant.is_null()) c["quantization_config"] = quant;
  return c.dump();
}

Json QwenFp8() {
  return {{"activation_scheme", "dynamic"},
          {"fmt", "e4m3"},
          {"quant_method", "fp8"},
          {"weight_block_size", {128, 128}},
          {"modules_to_not_convert", {"lm_head", "model.visual"}}};
}

StatusOr<Qwen3Config> Parse(const Json& quant) {
  return ParseQwen3Config(ConfigText(quant), "config.json");
}

void ExpectRefused(const Json& quant, StatusCode code, const std::string& needle) {
  auto c = Parse(quant);
  ASSERT_FALSE(c.ok()) << quant.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().ToString();
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("config.json: quantization_config"), std::string::npos) << m;
  EXPECT_NE(m.find(needle), std::string::npos) << needle << " in " << m;
}

TEST(QuantizationConfigTest, AcceptsTheQwenFp8Config) {
  auto c = Parse(QwenFp8());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->fp8.has_value());
  EXPECT_EQ(c->fp8->block_rows, 128);
  EXPECT_EQ(c->fp8->block_cols, 128);
  EXPECT_EQ(c->fp8->excluded_modules, (std::vector<std::string>{"lm_head", "model.visual"}));
  EXPECT_NE(CanonicalConfigText(*c).find(
                "quantization=fp8 e4m3 block 128x128 activation dynamic excluded "
                "\"lm_head\",\"model.visual\"\n"),
            std::string::npos)
      << CanonicalConfigText(*c);
}

TEST(QuantizationConfigTest, AbsentOrNullMeansNoQuantizationAndNoIdentityLine) {
  Json with_null = Json::parse(ConfigText(Json()));
  with_null["quantization_config"] = nullptr;
  for (const std::string& text : {ConfigText(Json()), with_null.dump()}) {
    auto c = ParseQwen3Config(text, "config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE(c->fp8.has_value());
    EXPECT_EQ(CanonicalConfigText(*c).find("quantization"), std::string::npos);
  }
}

TEST(QuantizationConfigTest, OptionalKeysAndOtherBlockSizes) {
  Json q = {{"quant_method", "fp8"}, {"weight_block_size", {64, 32}}};  // fmt, scheme absent
  auto c = Parse(q);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fp8->block_rows, 64);
  EXPECT_EQ(c->fp8->block_cols, 32);
  EXPECT_TRUE(c->fp8->excluded_modules.empty());
  // vLLM's ignored_layers joins modules_to_not_convert; null lists are no lists.
  q["ignored_layers"] = {"model.layers.0.mlp"};
  q["modules_to_not_convert"] = nullptr;
  q["some_future_key"] = 1;  // ignored like any other unknown config key
  c = Parse(q);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fp8->excluded_modules, std::vector<std::string>{"model.layers.0.mlp"});
  q["weight_block_size"] = {1, kMaxFp8BlockSize};
  EXPECT_TRUE(Parse(q).ok());
}

TEST(QuantizationConfigTest, OtherMethodsAndSchemesAreUnimplementedByName) {
  for (const char* method : {"awq", "gptq", "bitsandbytes", "compressed-tensors", "mxfp4"}) {
    ExpectRefused({{"quant_method", method}, {"bits", 4}}, StatusCode::kUnimplemented,
                  std::string("\"") + method + "\" is not supported");
  }
  Json q = QwenFp8();
  q["fmt"] = "e5m2";
  ExpectRefused(q, StatusCode::kUnimplemented, "fmt: \"e5m2\" is not supported");
  q = QwenFp8();
  q["activation_scheme"] = "static";
  ExpectRefused(q, StatusCode::kUnimplemented, "activation_scheme: \"static\" is not supported");
  q = QwenFp8();
  q.erase("weight_block_size");
  ExpectRefused(q, StatusCode::kUnimplemented, "weight_block_size: missing");
  q["weight_block_size"] = nullptr;
  ExpectRefused(q, StatusCode::kUnimplemented, "weight_block_size: missing");
}

TEST(QuantizationConfigTest, MalformedValuesAreRefusedNamingTheKey) {
  ExpectRefused(Json::array({1}), StatusCode::kInvalidArgument, "expected an object");
  ExpectRefused({{"fmt", "e4m3"}}, StatusCode::kInvalidArgument, "quant_method: required");
  ExpectRefused({{"quant_method", 8}}, StatusCode::kInvalidArgument, "quant_method");
  for (const Json& block :
       {Json{128}, Json{128, 128, 1}, Json{0, 128}, Json{128, -1}, Json{128.5, 128},
        Json{"128", 128}, Json("128x128"), Json{kMaxFp8BlockSize + 1, 1}}) {
    Json q = QwenFp8();
    q["weight_block_size"] = block;
    ExpectRefused(q, StatusCode::kInvalidArgument, "weight_block_size");
  }
  for (const Json& list : {Json("lm_head"), Json{"lm_head", 3}, Json{""}}) {
    Json q = QwenFp8();
    q["modules_to_not_convert"] = list;
    ExpectRefused(q, StatusCode::kInvalidArgument, "modules_to_not_convert");
  }
  Json q = QwenFp8();
  q["modules_to_not_convert"] = Json::array();
  for (size_t i = 0; i <= kMaxFp8ExcludedModules; ++i) q["modules_to_not_convert"].push_back("m");
  ExpectRefused(q, StatusCode::kInvalidArgument, "kMaxFp8ExcludedModules");
  q["modules_to_not_convert"] = {std::string(kMaxFp8ModuleNameBytes + 1, 'x')};
  ExpectRefused(q, StatusCode::kInvalidArgument, "kMaxFp8ModuleNameBytes");
}

TEST(QuantizationConfigTest, Qwen3VlReadsItAtTheTopOrInTextConfigButNotBothDiffering) {
  Json c = {{"model_type", "qwen3_vl"},
            {"text_config",
             {{"hidden_size", 64},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"intermediate_size", 128},
              {"vocab_size", 512},
              {"rope_theta", 5000000.0},
              {"rope_scaling", {{"rope_type", "default"}, {"mrope_section", {2, 3, 3}}}}}}};
  c["quantization_config"] = QwenFp8();
  auto top = ParseQwen3Config(c.dump(), "config.json");
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_TRUE(top->fp8.has_value());
  Json in_text = c;
  in_text.erase("quantization_config");
  in_text["text_config"]["quantization_config"] = QwenFp8();
  auto text = ParseQwen3Config(in_text.dump(), "config.json");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(text->fp8.has_value());
  c["text_config"]["quantization_config"] = QwenFp8();  // the same at both levels: fine
  EXPECT_TRUE(ParseQwen3Config(c.dump(), "config.json").ok());
  c["text_config"]["quantization_config"]["weight_block_size"] = {64, 64};
  auto both = ParseQwen3Config(c.dump(), "config.json");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("contradicts quantization_config"), std::string::npos)
      << both.status().ToString();
  c["text_config"]["quantization_config"] = {{"quant_method", "gptq"}};
  c.erase("quantization_config");
  auto gptq = ParseQwen3Config(c.dump(), "config.json");
  ASSERT_FALSE(gptq.ok());
  EXPECT_EQ(gptq.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(gptq.status().message().find("text_config.quantization_config.quant_method"),
            std::string::npos)
      << gptq.status().ToString();
}

TEST(QuantizationConfigTest, ModuleExclusionFollowsHuggingFacesRule) {
  Fp8Quantization q;
  q.excluded_modules = {"lm_head", "model.visual", "model.layers.*.mlp.gate_proj",
                        "model.layers.1.self_attn"};
  std::string key;
  EXPECT_TRUE(Fp8ModuleExcluded(q, "lm_head.weight", &key));
  EXPECT_EQ(key, "lm_head");
  EXPECT_TRUE(Fp8ModuleExcluded(q, "model.visual.blocks.3.attn.qkv.weight", &key));
  EXPECT_EQ(key, "model.visual");
  // Digits become '*' before the substring test, so one entry covers every layer...
  EXPECT_TRUE(Fp8ModuleExcluded(q, "model.layers.17.mlp.gate_proj.weight", &key));
  EXPECT_EQ(key, "model.layers.*.mlp.gate_proj");
  EXPECT_FALSE(Fp8ModuleExcluded(q, "model.layers.17.mlp.up_proj.weight", nullptr));
  // ...and an entry naming one layer matches that layer only (not layer 10 or 21).
  EXPECT_TRUE(Fp8ModuleExcluded(q, "model.layers.1.self_attn.q_proj.weight", nullptr));
  EXPECT_FALSE(Fp8ModuleExcluded(q, "model.layers.10.self_attn.q_proj.weight", nullptr));
  EXPECT_FALSE(Fp8ModuleExcluded(q, "model.layers.21.self_attn.q_proj.weight", nullptr));
  EXPECT_FALSE(Fp8ModuleExcluded(q, "model.language_model.layers.0.mlp.down_proj.weight", nullptr));
}

}  // namespace
}  // namespace vls
