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

}  // namespace
}  // namespace vls
