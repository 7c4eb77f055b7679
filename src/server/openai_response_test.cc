#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/pipeline_test_util.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kVocab = 512;

std::unique_ptr<tok::Tokenizer> Tokenizer() {
  auto t = tok::Tokenizer::FromJson(vls::testing::TinyChatTokenizerJson(kVocab));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

OutputPiece Text(const std::string& text, int32_t token) {
  OutputPiece p;
  p.delta.text = text;
  p.token = token;
  p.logprob = -0.5f;
  p.top_logprobs = {{token, -0.5f}, {7, -1.5f}};
  return p;
}

OutputPiece Finish(FinishReason r, int prompt, int completion, int cached = 0) {
  OutputPiece p;
  p.delta.finish = r;
  p.delta.usage = Usage{prompt, completion, cached};
  if (r == FinishReason::kStop) {
    p.token = kVocab - 1;  // the EOS that ended it: not part of the reply
    p.delta.stop_token = p.token;
  }
  if (r == FinishReason::kError) p.delta.error = "boom";
  return p;
}

ResponseMeta Meta() { return ResponseMeta{"chatcmpl-x", "m", 123}; }

// The pieces streamed, as parsed chunks.
std::vector<Json> StreamAll(ChatResponder& r, const std::vector<OutputPiece>& pieces) {
  std::vector<Json> out;
  for (const OutputPiece& p : pieces) {
    for (const std::string& s : r.StreamPiece(p)) out.push_back(Json::parse(s));
  }
  for (const std::string& s : r.StreamEnd()) out.push_back(Json::parse(s));
  return out;
}

std::string StreamedContent(const std::vector<Json>& chunks) {
  std::string text;
  for (const Json& c : chunks) {
    if (c.contains("choices") && !c["choices"].empty() &&
        c["choices"][0]["delta"].contains("content")) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  return text;
}

TEST(ChatResponder, StreamAndCompletionAgree) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.stream = true;
  req.include_usage = true;
  const std::vector<OutputPiece> pieces = {Text("Hel", 72), Text("", 300), Text("lo", 108),
                                           Finish(FinishReason::kStop, 9, 3, 4)};
  ChatResponder s(req, Meta(), tok.get());
  const std::vector<Json> chunks = StreamAll(s, pieces);
  ASSERT_GE(chunks.size(), 5u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_TRUE(chunks[0]["usage"].is_null());
  EXPECT_EQ(StreamedContent(chunks), "Hello");
  const Json& fin = chunks[chunks.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  const Json& usage = chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["total_tokens"], 12);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  for (const Json& c : chunks) EXPECT_EQ(c["id"], "chatcmpl-x");

  req.stream = false;
  req.include_usage = false;
  ChatResponder n(req, Meta(), tok.get());
  for (const OutputPiece& p : pieces) n.Collect(p);
  const Json c = n.Completion();
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["usage"]["total_tokens"], 12);
  EXPECT_FALSE(c["choices"][0]["message"].contains("tool_calls"));
}

TEST(ChatResponder, WithoutIncludeUsageNoUsageChunk) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.stream = true;
  ChatResponder s(req, Meta(), tok.get());
  const auto chunks = StreamAll(s, {Text("a", 97), Finish(FinishReason::kLength, 2, 1)});
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
  for (const Json& c : chunks) EXPECT_FALSE(c.contains("usage"));
}

TEST(ChatResponder, LogprobsForShownTokensOnly) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.logprobs = true;
  req.top_logprobs = 2;
  ChatResponder n(req, Meta(), tok.get());
  for (const OutputPiece& p : {Text("h", 104), Text("i", 105), Finish(FinishReason::kStop, 2, 3)}) {
    n.Collect(p);
  }
  const Json lp = n.Completion()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);  // the EOS that stopped it is not shown
  EXPECT_EQ(lp[0]["token"], "h");
  EXPECT_EQ(lp[0]["bytes"], Json::array({104}));
  EXPECT_FLOAT_EQ(lp[0]["logprob"].get<float>(), -0.5f);
  ASSERT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp[0]["top_logprobs"][1]["bytes"], Json::array({7}));
}

TEST(ChatResponder, ToolCallsStreamedAndNotAgree) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.chat.tools = Json::array({{{"type", "function"}, {"function", {{"name", "get"}}}}});
  const std::string text =
      "Let me look.<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>";
  // Split the text at every 3 bytes into pieces.
  std::vector<OutputPiece> pieces;
  for (size_t i = 0; i < text.size(); i += 3) pieces.push_back(Text(text.substr(i, 3), 1));
  pieces.push_back(Finish(FinishReason::kStop, 5, static_cast<int>(pieces.size()) + 1));

  ChatResponder n(req, Meta(), tok.get());
  for (const OutputPiece& p : pieces) n.Collect(p);
  const Json c = n.Completion();
  const Json& msg = c["choices"][0]["message"];
  EXPECT_EQ(msg["content"], "Let me look.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get");
  EXPECT_EQ(Json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");

  req.stream = true;
  ChatResponder s(req, Meta(), tok.get());
  const auto chunks = StreamAll(s, pieces);
  EXPECT_EQ(StreamedContent(chunks), "Let me look.");
  int calls = 0;
  for (const Json& ch : chunks) {
    const Json& d = ch["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    ++calls;
    EXPECT_EQ(d["tool_calls"][0]["index"], 0);
    EXPECT_EQ(d["tool_calls"][0]["function"]["name"], "get");
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatResponder, WithoutToolsTagsAreText) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  ChatResponder n(req, Meta(), tok.get());
  const std::string text = "<tool_call>\n{\"name\": \"get\"}\n</tool_call>";
  n.Collect(Text(text, 1));
  n.Collect(Finish(FinishReason::kStop, 1, 2));
  const Json c = n.Completion();
  EXPECT_EQ(c["choices"][0]["message"]["content"], text);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
}

// Issue 34: enforced calls (tool_choice "required") come separated by "\n", which is not
// content, streamed or not; a block cut by max_tokens stays text.
TEST(ChatResponder, EnforcedCallsHaveNoBlankContent) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.chat.tools = Json::array({{{"type", "function"}, {"function", {{"name", "get"}}}}});
  req.tool_choice = ToolChoice::kRequired;
  req.chat.structured.tools = StructuredOutput::Tools::kRequired;
  const std::string call = "<tool_call>\n{\"name\": \"get\", \"arguments\": {}}\n</tool_call>";
  const std::vector<OutputPiece> pieces = {Text(call, 1), Text("\n", 2), Text(call, 3),
                                           Finish(FinishReason::kStop, 1, 4)};
  ChatResponder n(req, Meta(), tok.get());
  for (const OutputPiece& p : pieces) n.Collect(p);
  Json c = n.Completion();
  EXPECT_TRUE(c["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(c["choices"][0]["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");

  req.stream = true;
  ChatResponder s(req, Meta(), tok.get());
  const std::vector<Json> chunks = StreamAll(s, pieces);
  EXPECT_EQ(StreamedContent(chunks), "");
  int calls = 0;
  for (const Json& ch : chunks) {
    if (!ch["choices"].empty() && ch["choices"][0]["delta"].contains("tool_calls")) ++calls;
  }
  EXPECT_EQ(calls, 2);

  // Cut by max_tokens inside the second call: the partial block is the content.
  ChatResponder cut(req, Meta(), tok.get());
  const std::vector<Json> cut_chunks =
      StreamAll(cut, {Text(call, 1), Text("\n", 2), Text("<tool_call>\n{\"na", 3),
                      Finish(FinishReason::kLength, 1, 3)});
  EXPECT_EQ(StreamedContent(cut_chunks), "<tool_call>\n{\"na");
  EXPECT_EQ(cut_chunks.back()["choices"][0]["finish_reason"], "length");

  // Free tool calls: blank text beside calls is no content in the completion either.
  ChatCompletionRequest free_req;
  free_req.chat.tools = req.chat.tools;
  ChatResponder f(free_req, Meta(), tok.get());
  for (const OutputPiece& p : pieces) f.Collect(p);
  c = f.Completion();
  EXPECT_TRUE(c["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(c["choices"][0]["message"]["tool_calls"].size(), 2u);
}

TEST(ChatResponder, ErrorAndCancelledEnds) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.stream = true;
  ChatResponder e(req, Meta(), tok.get());
  const auto chunks = StreamAll(e, {Text("a", 97), Finish(FinishReason::kError, 1, 1)});
  ASSERT_TRUE(chunks.back().contains("error"));
  EXPECT_NE(chunks.back()["error"]["message"].get<std::string>().find("boom"), std::string::npos);
  ChatResponder c(req, Meta(), tok.get());
  c.StreamPiece(Finish(FinishReason::kCancelled, 1, 0));
  EXPECT_TRUE(c.StreamEnd().empty());
}

TEST(OpenAiResponse, DumpReplacesInvalidUtf8AndErrorsAreShaped) {
  const std::string dumped = DumpJson(Json{{"t", std::string("a\xff\xfe")}});
  EXPECT_EQ(Json::parse(dumped)["t"], "a\xEF\xBF\xBD\xEF\xBF\xBD");
  OpenAiError e;
  e.message = "bad";
  e.param = "top_p";
  const Json b = ErrorBody(e);
  EXPECT_EQ(b["error"]["message"], "bad");
  EXPECT_EQ(b["error"]["type"], "invalid_request_error");
  EXPECT_EQ(b["error"]["param"], "top_p");
  EXPECT_TRUE(b["error"]["code"].is_null());
  EXPECT_NE(NewId("call_"), NewId("call_"));
  EXPECT_EQ(NewId("cmpl-").size(), 5u + 24u);
}

TEST(CompletionResponder, StreamAndCompletionAgree) {
  auto tok = Tokenizer();
  CompletionRequest req;
  req.logprobs = 1;
  const std::vector<OutputPiece> pieces = {Text("ab", 97), Text("c", 99),
                                           Finish(FinishReason::kLength, 4, 2)};
  CompletionResponder n(req, ResponseMeta{"cmpl-x", "m", 1}, tok.get());
  for (const OutputPiece& p : pieces) n.Collect(p);
  const Json c = n.Completion();
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "abc");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 2u);
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], Json::array({0, 1}));

  req.stream = true;
  req.include_usage = true;
  CompletionResponder s(req, ResponseMeta{"cmpl-x", "m", 1}, tok.get());
  std::string text;
  std::vector<Json> chunks;
  for (const OutputPiece& p : pieces) {
    for (const std::string& x : s.StreamPiece(p)) chunks.push_back(Json::parse(x));
  }
  for (const std::string& x : s.StreamEnd()) chunks.push_back(Json::parse(x));
  for (const Json& ch : chunks) {
    if (!ch["choices"].empty()) text += ch["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 2);
}

// The pieces a stop string "END" ends: "a" is shown; "E", "N" are held back (they may start the
// stop string) and "D" completes it, so the text is "a" and none of E, N, D is shown.
std::vector<OutputPiece> StoppedByString() {
  OutputPiece e = Text("", 'E'), n = Text("", 'N'), d = Text("", 'D');
  d.delta.finish = FinishReason::kStop;
  d.delta.stop_index = 0;
  d.delta.cancel_request = true;
  d.delta.usage = Usage{3, 4, 0};
  return {Text("a", 'a'), e, n, d};
}

// Issue 31: the tokens of a stop string were cut from the content but still listed in
// logprobs.content[], streamed or not.
TEST(ChatResponder, StopStringTokensAreNotInLogprobs) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.logprobs = true;
  req.top_logprobs = 1;
  ChatResponder n(req, Meta(), tok.get());
  for (const OutputPiece& p : StoppedByString()) n.Collect(p);
  const Json c = n.Completion();
  EXPECT_EQ(c["choices"][0]["message"]["content"], "a");
  const Json& lp = c["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 1u) << lp.dump();
  EXPECT_EQ(lp[0]["token"], "a");

  req.stream = true;
  ChatResponder s(req, Meta(), tok.get());
  const auto chunks = StreamAll(s, StoppedByString());
  EXPECT_EQ(StreamedContent(chunks), "a");
  std::string tokens;
  for (const Json& ch : chunks) {
    if (ch["choices"].empty() || ch["choices"][0]["logprobs"].is_null()) continue;
    for (const Json& t : ch["choices"][0]["logprobs"]["content"]) {
      tokens += t["token"].get<std::string>();
    }
  }
  EXPECT_EQ(tokens, "a");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
}

// Held-back text that turns out not to be a stop string is shown with its tokens' logprobs,
// when it is released (streamed) or at the end.
TEST(ChatResponder, HeldBackTokensAreShownOnceTheirTextIs) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  req.logprobs = true;
  req.stream = true;
  ChatResponder s(req, Meta(), tok.get());
  std::vector<Json> lps;
  auto push = [&](const OutputPiece& p) {
    for (const std::string& x : s.StreamPiece(p)) {
      const Json ch = Json::parse(x);
      if (!ch["choices"][0]["logprobs"].is_null()) lps.push_back(ch["choices"][0]["logprobs"]);
    }
  };
  push(Text("", 'E'));  // held back
  EXPECT_TRUE(lps.empty());
  push(Text("Ex", 'x'));  // released with the next token's text
  ASSERT_EQ(lps.size(), 1u);
  ASSERT_EQ(lps[0]["content"].size(), 2u);
  EXPECT_EQ(lps[0]["content"][0]["token"], "E");
  EXPECT_EQ(lps[0]["content"][1]["token"], "x");
  push(Text("", 'E'));
  OutputPiece last = Text("", 'N');
  last.delta.text = "EN";  // the length limit released what was held
  last.delta.finish = FinishReason::kLength;
  push(last);
  ASSERT_EQ(lps.size(), 2u);
  EXPECT_EQ(lps[1]["content"].size(), 2u);
}

TEST(CompletionResponder, StopStringTokensAreNotInLogprobs) {
  auto tok = Tokenizer();
  CompletionRequest req;
  req.logprobs = 0;
  CompletionResponder n(req, ResponseMeta{"cmpl-x", "m", 1}, tok.get());
  for (const OutputPiece& p : StoppedByString()) n.Collect(p);
  const Json c = n.Completion();
  EXPECT_EQ(c["choices"][0]["text"], "a");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], Json::array({"a"}));

  req.stream = true;
  CompletionResponder s(req, ResponseMeta{"cmpl-x", "m", 1}, tok.get());
  Json tokens = Json::array();
  for (const OutputPiece& p : StoppedByString()) {
    for (const std::string& x : s.StreamPiece(p)) {
      const Json ch = Json::parse(x);
      if (ch["choices"][0]["logprobs"].is_null()) continue;
      for (const Json& t : ch["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
    }
  }
  EXPECT_EQ(tokens, Json::array({"a"}));
}

// Issue 31: the rest of OpenAI's response shape.
TEST(ChatResponder, ResponseShapeHasFingerprintRefusalAndTokenDetails) {
  auto tok = Tokenizer();
  ChatCompletionRequest req;
  ResponseMeta meta = Meta();
  meta.system_fingerprint = "fp_0123456789";
  ChatResponder n(req, meta, tok.get());
  for (const OutputPiece& p : {Text("hi", 104), Finish(FinishReason::kStop, 2, 2)}) n.Collect(p);
  const Json c = n.Completion();
  EXPECT_EQ(c["system_fingerprint"], "fp_0123456789");
  const Json& msg = c["choices"][0]["message"];
  ASSERT_TRUE(msg.contains("refusal"));
  EXPECT_TRUE(msg["refusal"].is_null());
  EXPECT_EQ(msg["content"], "hi");
  const Json& details = c["usage"]["completion_tokens_details"];
  EXPECT_EQ(details["reasoning_tokens"], 0);
  EXPECT_EQ(details["accepted_prediction_tokens"], 0);
  EXPECT_EQ(details["rejected_prediction_tokens"], 0);

  req.stream = true;
  req.include_usage = true;
  ChatResponder s(req, meta, tok.get());
  const auto chunks = StreamAll(s, {Text("hi", 104), Finish(FinishReason::kStop, 2, 2)});
  ASSERT_GE(chunks.size(), 3u);
  for (const Json& ch : chunks) EXPECT_EQ(ch["system_fingerprint"], "fp_0123456789") << ch.dump();
  EXPECT_TRUE(chunks.back()["usage"].contains("completion_tokens_details"));

  // Without a fingerprint the field is null, not absent.
  ChatResponder plain(ChatCompletionRequest{}, Meta(), tok.get());
  plain.Collect(Finish(FinishReason::kStop, 1, 1));
  const Json p = plain.Completion();
  ASSERT_TRUE(p.contains("system_fingerprint"));
  EXPECT_TRUE(p["system_fingerprint"].is_null());

  CompletionResponder legacy(CompletionRequest{}, meta, tok.get());
  legacy.Collect(Finish(FinishReason::kStop, 1, 1));
  EXPECT_EQ(legacy.Completion()["system_fingerprint"], "fp_0123456789");
}

TEST(OpenAiResponse, ModelNameEchoesTheRequestWhenItNamesTheServedModel) {
  EXPECT_EQ(ResponseModelName("Qwen3-VL-2B", "Qwen3-VL-2B"), "Qwen3-VL-2B");
  EXPECT_EQ(ResponseModelName("qwen3-vl-2b", "Qwen3-VL-2B"), "qwen3-vl-2b");
  EXPECT_EQ(ResponseModelName("Qwen/Qwen3-VL-2B", "Qwen3-VL-2B"), "Qwen/Qwen3-VL-2B");
  EXPECT_EQ(ResponseModelName("gpt-4o", "Qwen3-VL-2B"), "Qwen3-VL-2B");
  EXPECT_EQ(ResponseModelName("", "Qwen3-VL-2B"), "Qwen3-VL-2B");
  EXPECT_EQ(ResponseModelName("xQwen3-VL-2B", "Qwen3-VL-2B"), "Qwen3-VL-2B");
  EXPECT_EQ(ResponseModelName("/", ""), "");
}

}  // namespace
}  // namespace vls::server
