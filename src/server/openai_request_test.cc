#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

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
  ExpectRefused(u + R"(, "response_format": {"type": "yaml"}})", "yaml", "response_format.type");
  ExpectRefused(R"({"messages": []})", "non-empty", "messages");
  ExpectRefused(R"({"messages": "hi"})", "non-empty", "messages");
  ExpectRefused(R"({"messages": [{"content": "no role"}]})", "role", "messages[0].role");
  ExpectRefused(u + R"(, "seed": -1})", "seed", "seed");
  ExpectRefused(u + R"(, "stop_token_ids": [1, "x"]})", "stop_token_ids", "stop_token_ids");
  ExpectRefused(u + R"(, "speculative": {"method": "ngram", "draft_tokens": 0}})", "draft_tokens",
                "speculative.draft_tokens");
  ExpectRefused(u + R"(, "speculative": {"method": "fast"}})", "method", "speculative");
  ExpectRefused(u + R"(, "stream_options": {"include_usage": 1}, "stream": true})", "include_usage",
                "stream_options.include_usage");
  ExpectRefused(u + R"(, "model": 7})", "model", "model");
  // A field quoted in the message is not the param: only the refused field is.
  ExpectRefused(u + R"(, "top_logprobs": 2})", "\"logprobs\"", "top_logprobs");
}

// Issue 31: a role the chat template does not know was silently dropped, and a part without a
// "type" was guessed from its keys; both are refused naming the field.
TEST(OpenAiRequest, UnknownRolesAndUntypedPartsAreRefusedByPath) {
  ExpectRefused(R"({"messages": [{"role": "bot", "content": "hi"}]})", "not a known role",
                "messages[0].role");
  ExpectRefused(R"({"messages": [{"role": "user", "content": "a"}, {"role": "User",
      "content": "b"}]})",
                "not a known role", "messages[1].role");
  ExpectRefused(R"({"messages": [{"role": 3, "content": "hi"}]})", "role", "messages[0].role");
  ExpectRefused(R"({"messages": ["hi"]})", "must be an object", "messages[0]");
  ExpectRefused(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user",
      "content": [{"type": "text", "text": "a"}, {"text": "untyped"}]}]})",
                "is required", "messages[1].content[1].type");
  ExpectRefused(R"({"messages": [{"role": "user", "content": [{"type": 1, "text": "a"}]}]})",
                "type", "messages[0].content[0].type");
  ExpectRefused(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})",
                "unsupported content part", "messages[0].content[0].type");
  ExpectRefused(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
                "without a string", "messages[0].content[0].text");
  ExpectRefused(R"({"messages": [{"role": "user", "content": 5}]})", "content",
                "messages[0].content");
  for (const char* role : {"system", "developer", "user", "assistant", "tool"}) {
    auto r = Chat(std::string(R"({"messages": [{"role": ")") + role +
                  R"(", "content": [{"type": "text", "text": "x"}]}]})");
    EXPECT_TRUE(r.ok()) << role << ": " << r.status().ToString();
  }
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

// A user message whose content is `parts` (JSON text of the list's items).
std::string WithParts(const std::string& parts, const std::string& extra = "") {
  return R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "what"}, )" +
         parts + "]}]" + extra + "}";
}

constexpr const char* kClip = R"("data:video/mp4;base64,AAAA")";

TEST(OpenAiRequest, VideoPartsAndTheirOptions) {
  for (const std::string& part :
       {std::string(R"({"type": "video_url", "video_url": {"url": )") + kClip + "}}",
        std::string(R"({"type": "video_url", "video_url": )") + kClip + "}",
        std::string(R"({"type": "video", "video": )") + kClip + "}",
        std::string(R"({"type": "video_url", "video_url": {"url": )") + kClip +
            R"(}, "fps": 1.5, "max_frames": 8})",
        std::string(R"({"type": "video", "video": )") + kClip + R"(, "num_frames": 6})"}) {
    auto r = Chat(WithParts(part));
    EXPECT_TRUE(r.ok()) << part << ": " << r.status().ToString();
  }
  // video_url parts reach the pipeline as the "video" parts the Qwen3-VL template places, with
  // their other fields kept.
  auto v = Chat(WithParts(std::string(R"({"type": "video_url", "video_url": {"url": )") + kClip +
                          R"(}, "fps": 1.5}, {"type": "video_url", "video_url": )" + kClip + "}"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const Json& content = v->chat.messages[0]["content"];
  EXPECT_EQ(content[1].dump(),
            R"({"type":"video","video":"data:video/mp4;base64,AAAA","fps":1.5})");
  EXPECT_EQ(content[2].dump(), R"({"type":"video","video":"data:video/mp4;base64,AAAA"})");
  // mm_processor_kwargs becomes the request's video defaults.
  auto r = Chat(WithParts(std::string(R"({"type": "video", "video": )") + kClip + "}",
                          R"(, "mm_processor_kwargs": {"fps": 0.5, "max_frames": 32})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.video.fps, 0.5);
  EXPECT_EQ(r->chat.video.max_frames, 32);
  EXPECT_FALSE(r->chat.video.num_frames.has_value());
  r = Chat(WithParts(std::string(R"({"type": "video", "video": )") + kClip + "}",
                     R"(, "mm_processor_kwargs": {"num_frames": 4}, "mm_processor_kwargs2": 1)"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().param(), "mm_processor_kwargs2");
  r = Chat(WithParts(std::string(R"({"type": "video", "video": )") + kClip + "}",
                     R"(, "mm_processor_kwargs": null)"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->chat.video.fps.has_value());
}

TEST(OpenAiRequest, RefusesBadVideoPartsByPath) {
  const std::string clip = std::string(R"({"type": "video_url", "video_url": {"url": )") + kClip;
  ExpectRefused(WithParts(R"({"type": "video_url"})"), "video_url",
                "messages[0].content[1].video_url");
  ExpectRefused(WithParts(R"({"type": "video_url", "video_url": {"uri": "x"}})"), "url",
                "messages[0].content[1].video_url");
  ExpectRefused(WithParts(R"({"type": "video_url", "video_url": 7})"), "video_url",
                "messages[0].content[1].video_url");
  ExpectRefused(WithParts(R"({"type": "video"})"), "required", "messages[0].content[1].video");
  ExpectRefused(WithParts(R"({"type": "video", "video": ["a"]})"), "string",
                "messages[0].content[1].video");
  ExpectRefused(WithParts(clip + R"(}, "fps": 0})"), "more than 0", "messages[0].content[1].fps");
  ExpectRefused(WithParts(clip + R"(}, "fps": 61})"), "60", "messages[0].content[1].fps");
  ExpectRefused(WithParts(clip + R"(}, "fps": "2"})"), "number", "messages[0].content[1].fps");
  ExpectRefused(WithParts(clip + R"(}, "max_frames": 0})"), "max_frames",
                "messages[0].content[1].max_frames");
  ExpectRefused(WithParts(clip + R"(}, "max_frames": 769})"), "768",
                "messages[0].content[1].max_frames");
  ExpectRefused(WithParts(clip + R"(}, "num_frames": 2.5})"), "num_frames",
                "messages[0].content[1].num_frames");
  ExpectRefused(WithParts(clip + R"(}, "num_frames": 4, "fps": 2})"), "cannot both",
                "messages[0].content[1].num_frames");
  ExpectRefused(WithParts(clip + "}}", R"(, "mm_processor_kwargs": {"fps": 100})"), "fps",
                "mm_processor_kwargs.fps");
  ExpectRefused(WithParts(clip + "}}", R"(, "mm_processor_kwargs": {"max_pixels": 100})"),
                "not a known field", "mm_processor_kwargs.max_pixels");
  ExpectRefused(WithParts(clip + "}}", R"(, "mm_processor_kwargs": [1])"), "object",
                "mm_processor_kwargs");
  // The server's own bounds (serve --video-max-fps / --video-max-frames).
  RequestLimits limits;
  limits.max_video_fps = 4;
  limits.max_video_frames = 16;
  auto r = Chat(WithParts(clip + R"(}, "fps": 5})"), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().param(), "messages[0].content[1].fps");
  r = Chat(WithParts(clip + "}}", R"(, "mm_processor_kwargs": {"num_frames": 17})"), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().param(), "mm_processor_kwargs.num_frames");
  r = Chat(WithParts(clip + R"(}, "fps": 4, "max_frames": 16})"), limits);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  // Videos count with images against max_images.
  limits.max_images = 1;
  r = Chat(WithParts(clip + "}}, " + clip + "}}"), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2 images or videos"), std::string::npos)
      << r.status().ToString();
  // mm_processor_kwargs is for chats.
  auto c = ParseCompletionRequest(Parse(R"({"prompt": "x", "mm_processor_kwargs": {}})"),
                                  SamplingParams{}, RequestLimits{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().param(), "mm_processor_kwargs");
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

// Issue 34: the structured-output fields reach ChatRequest::structured through the runtime's
// reader (StructuredOutputFromJson), chat and completions alike.
TEST(OpenAiRequest, StructuredOutputFields) {
  using Kind = StructuredOutput::Kind;
  using Tools = StructuredOutput::Tools;
  const std::string u = std::string("{") + kUser;
  auto r = Chat(u + R"(, "response_format": {"type": "json_schema", "json_schema":
      {"name": "x", "schema": {"type": "integer"}, "strict": true}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(Json::parse(r->chat.structured.source), Json::parse(R"({"type": "integer"})"));
  EXPECT_TRUE(r->chat.structured.strict);
  r = Chat(u + R"(, "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.kind, Kind::kJsonObject);
  r = Chat(u + R"(, "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->chat.structured.active());
  r = Chat(u + R"(, "grammar": "root ::= \"a\""})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.kind, Kind::kGbnf);
  EXPECT_EQ(r->chat.structured.source, "root ::= \"a\"");
  r = Chat(u + R"(, "regex": "[0-9]+"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.kind, Kind::kRegex);
  r = Chat(u + R"(, "json_schema": {"type": "boolean"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.kind, Kind::kJsonSchema);
  EXPECT_FALSE(r->chat.structured.strict);

  const std::string tools =
      R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}},
          {"type": "function", "function": {"name": "g", "strict": true}}])";
  r = Chat(u + tools + R"(, "tool_choice": "required"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.tools, Tools::kRequired);
  EXPECT_TRUE(r->parse_tool_calls());
  r = Chat(u + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.tools, Tools::kNamed);
  EXPECT_EQ(r->chat.structured.tool_name, "g");
  r = Chat(u + tools + "}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.tools, Tools::kStrict);  // "auto" with a strict tool
  r = Chat(u + tools + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.structured.tools, Tools::kFree);
  EXPECT_TRUE(r->chat.tools.is_null());

  ExpectRefused(u + R"(, "grammar": 5})", "grammar", "grammar");
  ExpectRefused(u + R"(, "regex": "a", "grammar": "root ::= \"a\""})", "grammar", "regex");
  ExpectRefused(u + R"(, "response_format": {"type": "json_schema"}})", "json_schema",
                "response_format.json_schema");
  ExpectRefused(u + tools + R"(, "tool_choice": "required", "json_schema": {}})", "required",
                "json_schema");
  ExpectRefused(u + R"(, "tools": [{"type": "function", "function": {"name": "f",
                   "strict": "yes"}}]})",
                "strict", "tools[0].function.strict");

  // A stop string would cut a reply format short: refused; stop ids (taken only where the
  // grammar may end) and tool calls keep them.
  ExpectRefused(u + R"(, "stop": ["}"], "response_format": {"type": "json_object"}})",
                "cannot be combined", "stop");
  EXPECT_TRUE(Chat(u + tools + R"(, "stop": "x", "tool_choice": "required"})").ok());
  EXPECT_TRUE(Chat(u + R"(, "stop_token_ids": [5], "regex": "a+"})").ok());
  EXPECT_TRUE(Chat(u + tools + R"(, "stop": "x"})").ok());
  EXPECT_FALSE(
      ParseCompletionRequest(Parse(R"({"prompt": "a", "stop": "}", "grammar": "root ::= \"a\""})"),
                             SamplingParams{}, RequestLimits{})
          .ok());

  auto c = ParseCompletionRequest(Parse(R"({"prompt": "a", "json_schema": {"enum": [1, 2]}})"),
                                  SamplingParams{}, RequestLimits{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->params.structured.kind, Kind::kJsonSchema);
  c = ParseCompletionRequest(
      Parse(R"({"prompt": "a", "response_format": {"type": "json_schema", "json_schema":
                {"name": "n", "schema": {"type": "null"}}}})"),
      SamplingParams{}, RequestLimits{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->params.structured.kind, Kind::kJsonSchema);
  c = ParseCompletionRequest(Parse(R"({"prompt": "a", "regex": "x", "tool_choice": "required"})"),
                             SamplingParams{}, RequestLimits{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(ErrorFromStatus(c.status()).param, "tool_choice");
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
  // The param is the status's data, never read from the message text.
  EXPECT_EQ(ErrorFromStatus(InvalidArgument("\"top_p\" must be")).param, "");
  EXPECT_EQ(ErrorFromStatus(InvalidArgument("x").WithParam("top_p")).param, "top_p");
  EXPECT_EQ(
      ErrorFromStatus(InvalidArgument("\"a\" bad").WithParam("messages[2].content[0].type")).param,
      "messages[2].content[0].type");
  EXPECT_EQ(ErrorFromStatus(Internal("x").WithParam("top_p")).param, "");  // not a client error
}

// Issue 31: a prompt past the chat template's budget was ResourceExhausted, answered 429 with
// Retry-After (so SDKs retried it). Capacity stays 429; a prompt that does not fit is 400
// context_length_exceeded naming the messages.
TEST(OpenAiRequest, AnOverLongPromptIsAClientErrorAndAFullQueueIsNot) {
  const OpenAiError too_long =
      ErrorFromStatus(OutOfRange("the messages are too long").WithParam("messages"));
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.type, "invalid_request_error");
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  EXPECT_EQ(too_long.param, "messages");
  EXPECT_EQ(ErrorFromStatus(OutOfRange("x").WithParam("prompt")).code, "context_length_exceeded");
  const OpenAiError image = ErrorFromStatus(OutOfRange("image too large"));
  EXPECT_EQ(image.status, 400);
  EXPECT_EQ(image.code, "");
  const OpenAiError busy = ErrorFromStatus(ResourceExhausted("the server is busy"));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.type, "rate_limit_error");
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
  Json legacy = Json::parse(R"({"prompt": "hi"})");
  legacy[name] = 1;
  auto c = ParseCompletionRequest(legacy, SamplingParams{}, RequestLimits{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(ErrorFromStatus(c.status()).param, name);
}

TEST(OpenAiRequest, CompletionRefusalsNameTheField) {
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "hi", "echo": true})", "echo"},
           {R"({"prompt": "hi", "suffix": "x"})", "suffix"},
           {R"({"prompt": "hi", "best_of": 2})", "best_of"},
           {R"({"prompt": "hi", "logprobs": 6})", "logprobs"},
           {R"({"prompt": [1, -2]})", "prompt"},
           {R"({"prompt": "hi", "messages": []})", "messages"},
           {R"({"prompt": "hi", "top_k": -1})", "top_k"}}) {
    auto r = ParseCompletionRequest(Parse(body), SamplingParams{}, RequestLimits{});
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(ErrorFromStatus(r.status()).param, param) << body << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace vls::server
