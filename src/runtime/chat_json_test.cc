#include "runtime/chat_json.h"

#include <gtest/gtest.h>

namespace vls {
namespace {

TEST(ChatJsonTest, FieldsAndDefaults) {
  SamplingParams defaults;
  defaults.temperature = 0.7f;
  defaults.top_k = 20;
  auto r = ChatRequestFromJsonText(
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":12,"top_p":0.5,
          "seed":42,"stop":"END","stop_token_ids":[7],"ignore_eos":true,"logprobs":3,
          "logit_bias":{"5":150,"9":-1.5},"enable_thinking":false})",
      defaults);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->max_tokens, 12);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.7f);  // absent: the model's default
  EXPECT_EQ(r->sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.5f);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r->stop_token_ids, std::vector<int32_t>{7});
  EXPECT_TRUE(r->ignore_eos);
  EXPECT_EQ(r->logprobs, 3);
  ASSERT_EQ(r->sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r->sampling.logit_bias[0], (std::pair<int32_t, float>{5, 100.0f}));  // clamped
  EXPECT_EQ(r->enable_thinking, std::optional<bool>(false));
  EXPECT_TRUE(r->add_generation_prompt);
}

TEST(ChatJsonTest, SpeculativeMethodAndDraftTokens) {
  const SamplingParams d;
  const std::string head = R"({"messages":[{"role":"user","content":"x"}])";
  auto absent = ChatRequestFromJsonText(head + "}", d);
  auto null = ChatRequestFromJsonText(head + R"(,"speculative":null})", d);
  auto off = ChatRequestFromJsonText(head + R"(,"speculative":{"method":"off"}})", d);
  auto ngram = ChatRequestFromJsonText(head + R"(,"speculative":{"method":"ngram"}})", d);
  auto draft =
      ChatRequestFromJsonText(head + R"(,"speculative":{"method":"draft","draft_tokens":3}})", d);
  ASSERT_TRUE(absent.ok() && null.ok() && off.ok() && ngram.ok() && draft.ok());
  EXPECT_FALSE(absent->speculative.has_value());  // the engine's default
  EXPECT_FALSE(null->speculative.has_value());
  ASSERT_TRUE(off->speculative && ngram->speculative && draft->speculative);
  EXPECT_EQ(off->speculative->draft_tokens, 0);
  EXPECT_EQ(ngram->speculative->draft_tokens, kDefaultDraftTokens);
  EXPECT_EQ(ngram->speculative->source, DraftSource::kNgram);
  EXPECT_EQ(draft->speculative->draft_tokens, 3);
  EXPECT_EQ(draft->speculative->source, DraftSource::kModel);
}

TEST(ChatJsonTest, BadFieldsAreNamed) {
  const SamplingParams d;
  const char* cases[][2] = {
      {R"({"messages":[]})", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_token":3})", "max_token"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4294967297})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":1e300})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"seed":-1})", "seed"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"ignore_eos":1})", "ignore_eos"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":21})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"a":1}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"3":"x"}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"speculative":"ngram"})", "speculative"},
      {R"({"messages":[{"role":"user","content":"x"}],"speculative":{}})", "method"},
      {R"({"messages":[{"role":"user","content":"x"}],"speculative":{"method":"eagle"}})", "eagle"},
      {R"({"messages":[{"role":"user","content":"x"}],"speculative":{"method":"ngram","k":2}})",
       "unknown field \"k\""},
      {R"({"messages":[{"role":"user","content":"x"}],
          "speculative":{"method":"ngram","draft_tokens":65}})",
       "speculative.draft_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],
          "speculative":{"method":"off","draft_tokens":2}})",
       "needs a method"},
      {R"([1,2])", "object"},
      {R"({"messages":)", "JSON"},
  };
  for (const auto& c : cases) {
    auto r = ChatRequestFromJsonText(c[0], d);
    ASSERT_FALSE(r.ok()) << c[0];
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c[0];
    EXPECT_NE(r.status().message().find(c[1]), std::string::npos)
        << c[0] << " -> " << r.status().ToString();
  }
}

TEST(ChatJsonTest, TypedFieldsAreNeverCoerced) {
  const SamplingParams d;
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  const char* cases[][2] = {
      {R"("max_tokens":true)", "max_tokens"},
      {R"("max_tokens":2.7)", "max_tokens"},
      {R"("max_tokens":"3")", "max_tokens"},
      {R"("top_k":-1)", "top_k"},
      {R"("top_k":18446744073709551615)", "top_k"},
      {R"("logprobs":false)", "logprobs"},
      {R"("add_generation_prompt":1)", "add_generation_prompt"},
      {R"("enable_thinking":"yes")", "enable_thinking"},
      {R"("seed":1.5)", "seed"},
      {R"("seed":true)", "seed"},
      {R"("stop_token_ids":[1.0])", "stop_token_ids"},
      {R"("stop_token_ids":[9223372036854775808])", "stop_token_ids"},
      {R"("logit_bias":{"05":1})", "logit_bias"},
      {R"("logit_bias":{"+5":1})", "logit_bias"},
      {R"("logit_bias":{" 5":1})", "logit_bias"},
      {R"("logit_bias":{"5":true})", "logit_bias"},
      {R"("temperature":true)", "temperature"},
  };
  for (const auto& c : cases) {
    const std::string text = "{" + m + "," + c[0] + "}";
    auto r = ChatRequestFromJsonText(text, d);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(c[1]), std::string::npos)
        << text << " -> " << r.status().ToString();
  }
  // Null is the same as absent; the whole uint64 range is a seed.
  auto r = ChatRequestFromJsonText(
      "{" + m + R"(,"add_generation_prompt":null,"max_tokens":null,"seed":18446744073709551615})",
      d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_EQ(r->sampling.seed, std::optional<uint64_t>(18446744073709551615ull));
}

TEST(ChatJsonTest, TextIsParsedUnderTheUntrustedRules) {
  const SamplingParams d;
  const std::string m = R"({"messages":[{"role":"user","content":)";
  const std::pair<std::string, const char*> cases[] = {
      {m + R"("x"}],"top_k":1,"top_k":2})", "twice"},
      {m + std::string(62, '[') + std::string(62, ']') + "}]}", "nests deeper"},
      {m + std::string(200000, '[') + std::string(200000, ']') + "}]}", "nests deeper"},
      {m + R"("x"}]})" + std::string(1, '\0') + "{}", "NUL"},
      {m + R"("x"}]} {})", "JSON"},
      {m + "\"\xff\"}]}", "JSON"},
  };
  for (const auto& [text, needle] : cases) {
    auto r = ChatRequestFromJsonText(text, d);
    ASSERT_FALSE(r.ok()) << text.substr(0, 80);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
  }
  // 64 levels (object, messages, message, 61 lists) are within the bound; 65 above.
  auto ok = ChatRequestFromJsonText(m + std::string(61, '[') + std::string(61, ']') + "}]}", d);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

// The ordered parse builds objects by appending: every key kept, in input order, with many keys
// (nlohmann's own ordered parse searches the keys so far for each one: quadratic).
TEST(ChatJsonTest, ManyKeysKeepTheirOrder) {
  constexpr int kKeys = 100000;
  std::string kwargs = "{";
  for (int i = kKeys - 1; i >= 0; --i) {
    kwargs += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + (i > 0 ? "," : "}");
  }
  auto r = ChatRequestFromJsonText(
      R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":)" + kwargs + "}",
      SamplingParams());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->template_kwargs.size(), static_cast<size_t>(kKeys));
  int expect = kKeys - 1;
  for (const auto& [key, value] : r->template_kwargs.items()) {
    ASSERT_EQ(key, "k" + std::to_string(expect));
    ASSERT_EQ(value.get<int>(), expect);
    --expect;
  }
  nlohmann::ordered_json nested;
  ASSERT_TRUE(
      ParseUntrustedOrderedJson("t", R"({"b":[1,{"z":null,"a":[true,2.5,"s"]}],"a":{}})", &nested)
          .ok());
  EXPECT_EQ(nested.dump(), R"({"b":[1,{"z":null,"a":[true,2.5,"s"]}],"a":{}})");
}

}  // namespace
}  // namespace vls
