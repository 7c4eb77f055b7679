#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/chat_json.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;

Json Parse(const std::string& text) {
  Json j;
  Status s = ParseUntrustedOrderedJson("test", text, &j);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return j;
}

StatusOr<ChatCompletionRequest> Chat(const std::string& text, RequestLimits limits = {}) {
  return ParseChatCompletionRequest(Parse(text), SamplingParams{}, limits);
}

// The refusal's message and param.
void ExpectRefused(const std::string& text, const std::string& needle, const std::string& param,
                   int status = 400) {
  auto r = Chat(text);
  ASSERT_FALSE(r.ok()) << text;
  const OpenAiError e = ErrorFromStatus(r.status());
  EXPECT_EQ(e.status, status) << text;
  EXPECT_NE(e.message.find(needle), std::string::npos) << text << " -> " << e.message;
  if (param != "*") {
    EXPECT_EQ(e.param, param) << text << " -> " << e.message;
  }
}

constexpr const char* kUser = R"("messages": [{"role": "user", "content": "hi"}])";

TEST(OpenAiRequest, ReadsEveryChatField) {
  auto r = Chat(std::string("{") + kUser + R"(, "model": "m", "stream": true,
      "stream_options": {"include_usage": true}, "n": 1, "max_completion_tokens": 7,
      "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 42,
      "stop": ["a", "bc"], "presence_penalty": 0.5, "frequency_penalty": 0.25,
      "logprobs": true, "top_logprobs": 3, "user": "u", "parallel_tool_calls": true,
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}},
      "response_format": {"type": "text"}, "repetition_penalty": 1.1})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->chat.max_tokens, 7);
  EXPECT_FLOAT_EQ(r->chat.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->chat.sampling.top_p, 0.9f);
  EXPECT_EQ(r->chat.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r->chat.sampling.min_p, 0.05f);
  EXPECT_EQ(r->chat.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(r->chat.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->chat.sampling.frequency_penalty, 0.25f);
  EXPECT_FLOAT_EQ(r->chat.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r->chat.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->chat.logprobs, 3);
  EXPECT_EQ(r->tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r->tool_name, "f");
  EXPECT_TRUE(r->parse_tool_calls());
  ASSERT_TRUE(r->chat.tools.is_array());
  EXPECT_EQ(r->chat.tools.size(), 1u);
}

TEST(OpenAiRequest, DefaultsAndStringStop) {
  auto r = Chat(std::string("{") + kUser + R"(, "stop": "END", "logprobs": false})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->chat.max_tokens.has_value());
  EXPECT_EQ(r->chat.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r->chat.logprobs, -1);
  EXPECT_TRUE(r->chat.tools.is_null());
  EXPECT_FALSE(r->parse_tool_calls());
}

TEST(OpenAiRequest, NullContentAndTheDeveloperRole) {
  auto r = Chat(R"({"messages": [{"role": "developer", "content": "be brief"},
      {"role": "assistant", "content": null, "tool_calls": []}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.messages[0]["role"], "system");
  EXPECT_EQ(r->chat.messages[1]["content"], "");
}

TEST(OpenAiRequest, ToolChoiceNoneDropsTheTools) {
  auto r = Chat(std::string("{") + kUser +
                R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": "none"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->chat.tools.is_null());
  EXPECT_FALSE(r->parse_tool_calls());
}

TEST(OpenAiRequest, RefusalsNameTheField) {
  const std::string u = std::string("{") + kUser;
  ExpectRefused(u + R"(, "n": 2})", "must be 1", "n");
  ExpectRefused(u + R"(, "bogus": 1})", "not a known field", "bogus");
  ExpectRefused(u + R"(, "temperature": "hot"})", "temperature", "temperature");
  ExpectRefused(u + R"(, "temperature": -1})", "temperature", "temperature");
  ExpectRefused(u + R"(, "max_tokens": 0})", "max_tokens", "max_tokens");
  ExpectRefused(u + R"(, "max_tokens": 5, "max_completion_tokens": 6})", "disagree",
                "max_completion_tokens");
  ExpectRefused(u + R"(, "top_logprobs": 2})", "needs", "top_logprobs");
  ExpectRefused(u + R"(, "logprobs": true, "top_logprobs": 21})", "top_logprobs", "top_logprobs");
  ExpectRefused(u + R"(, "stream_options": {"include_usage": true}})", "only allowed",
                "stream_options");
  ExpectRefused(u + R"(, "stream": "yes"})", "stream", "stream");
  ExpectRefused(u + R"(, "tools": [{"type": "function"}]})", "must be an object",
                "tools[0].function");
  ExpectRefused(u + R"(, "tools": {"a": 1}})", "list", "tools");
  ExpectRefused(u + R"(, "tool_choice": "auto"})", "needs", "tool_choice");
  ExpectRefused(u + R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": {"type": "function", "function": {"name": "g"}}})",
                "not in tools", "tool_choice");
  ExpectRefused(u + R"(, "response_format": {"type": "json_object"}})", "not supported",
                "response_format");
  ExpectRefused(R"({"messages": []})", "non-empty", "messages");
  ExpectRefused(R"({"messages": "hi"})", "non-empty", "messages");
  ExpectRefused(R"({"messages": [{"content": "no role"}]})", "role", "*");
}

TEST(OpenAiRequest, Limits) {
  RequestLimits limits;
  limits.max_messages = 2;
  limits.max_images = 1;
  limits.max_stop = 2;
  auto r = Chat(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant",
      "content": "b"}, {"role": "user", "content": "c"}]})",
                limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 2"), std::string::npos);
  const std::string img =
      R"({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}})";
  r = Chat(R"({"messages": [{"role": "user", "content": [)" + img + "," + img + "]}]}", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2 images"), std::string::npos) << r.status().ToString();
  r = Chat(std::string("{") + kUser + R"(, "stop": ["a", "b", "c"]})", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 2"), std::string::npos);
}

TEST(OpenAiRequest, CompletionPrompts) {
  const RequestLimits limits;
  auto r = ParseCompletionRequest(Parse(R"({"prompt": "Once", "max_tokens": 3, "logprobs": 2})"),
                                  SamplingParams{}, limits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "Once");
  EXPECT_EQ(r->params.max_tokens, 3);
  EXPECT_EQ(r->params.logprobs, 2);
  r = ParseCompletionRequest(Parse(R"({"prompt": ["Once"]})"), SamplingParams{}, limits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt, "Once");
  r = ParseCompletionRequest(Parse(R"({"prompt": [1, 2, 3]})"), SamplingParams{}, limits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{1, 2, 3}));
  r = ParseCompletionRequest(Parse(R"({"prompt": [[4, 5]]})"), SamplingParams{}, limits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{4, 5}));
  for (const char* bad :
       {R"({})", R"({"prompt": ""})", R"({"prompt": ["a", "b"]})", R"({"prompt": [1, -2]})",
        R"({"prompt": 5})", R"({"prompt": "a", "echo": true})", R"({"prompt": "a", "suffix": "b"})",
        R"({"prompt": "a", "logprobs": 6})", R"({"prompt": "a", "messages": []})",
        R"({"prompt": "a", "best_of": 2})"}) {
    EXPECT_FALSE(ParseCompletionRequest(Parse(bad), SamplingParams{}, limits).ok()) << bad;
  }
}

TEST(OpenAiRequest, ErrorFromStatusMapsCodes) {
  EXPECT_EQ(ErrorFromStatus(InvalidArgument("x")).status, 400);
  EXPECT_EQ(ErrorFromStatus(Unimplemented("x")).status, 400);
  EXPECT_EQ(ErrorFromStatus(Unimplemented("x")).code, "unsupported");
  EXPECT_EQ(ErrorFromStatus(ResourceExhausted("x")).status, 429);
  EXPECT_EQ(ErrorFromStatus(FailedPrecondition("x")).status, 503);
  const OpenAiError internal = ErrorFromStatus(Internal("boom"));
  EXPECT_EQ(internal.status, 500);
  EXPECT_EQ(internal.type, "server_error");
  EXPECT_EQ(ErrorFromStatus(InvalidArgument("messages[2].content[0]: bad")).param, "");
  EXPECT_EQ(ErrorFromStatus(InvalidArgument("\"top_p\" must be")).param, "top_p");
  EXPECT_EQ(ErrorFromStatus(InvalidArgument("\"a b\" and \"c\" d")).param, "c");
}

// Issue 31: an unknown field with a 200,000-character name killed the server (std::regex
// recursed once per character). Its refusal now names it, through the whole request parser.
TEST(OpenAiRequest, HugeUnknownFieldNameIsRefusedNotACrash) {
  const std::string name(200000, 'x');
  Json body = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  body[name] = 1;
  auto r = ParseChatCompletionRequest(body, SamplingParams{}, RequestLimits{});
  ASSERT_FALSE(r.ok());
  const OpenAiError e = ErrorFromStatus(r.status());
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, name);
}

}  // namespace
}  // namespace vls::server
