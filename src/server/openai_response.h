// OpenAI response bodies: the chat completion and its stream chunks, the legacy completion,
// usage, log-probabilities and errors (docs/contracts.md §7). Pure: JSON in, JSON out, so the
// shapes are unit-tested without a model (openai_response_test.cc).
//
// ChatResponder turns one request's text deltas (TextStream) into what the client sees:
//   - streaming: a first chunk with the assistant role, one chunk per non-empty piece of text,
//     tool calls as `delta.tool_calls` once each call is complete, a last chunk with the
//     finish_reason, then (stream_options.include_usage) a chunk with empty choices and the
//     usage; every chunk carries "usage": null while include_usage is on;
//   - non-streaming: one chat.completion object.
// With tools, the text goes through ToolCallStream: `<tool_call>` blocks become tool_calls and
// finish_reason "tool_calls" (when the model stopped by itself). Blank content beside calls is
// null in the completion, and not streamed at all when the calls are enforced (tool_choice
// "required" or a named function: the grammar writes "\n" between calls); a block cut by
// max_tokens stays text either way.
//
// All model text is dumped with invalid UTF-8 replaced (U+FFFD): a token's bytes need not be
// valid UTF-8 on their own.
#ifndef VLSTACK_SERVER_OPENAI_RESPONSE_H_
#define VLSTACK_SERVER_OPENAI_RESPONSE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/batch_engine.h"
#include "runtime/text_stream.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace vls::server {

// JSON text of `j` with invalid UTF-8 replaced; never throws on model text.
std::string DumpJson(const nlohmann::ordered_json& j);

// {"error": {"message", "type", "param", "code"}}.
nlohmann::ordered_json ErrorBody(const OpenAiError& e);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}, "completion_tokens_details": {"reasoning_tokens", "audio_tokens",
// "accepted_prediction_tokens", "rejected_prediction_tokens"}} (the details are 0: no reasoning
// split, no audio, no predicted outputs).
nlohmann::ordered_json UsageJson(const Usage& u);

// "stop", "length", or (a request that ended another way) null.
nlohmann::ordered_json FinishReasonJson(FinishReason r);

// One generated token as OpenAI's chat logprobs entry: {"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}.
nlohmann::ordered_json TokenLogprobJson(const tok::Tokenizer& tokenizer, int32_t token,
                                        float logprob, const std::vector<TokenLogprob>& top);

// A fresh id with `prefix` ("chatcmpl-", "cmpl-", "call_") and 24 random characters.
std::string NewId(const char* prefix);

// One piece of a request's output as the service hands it over.
struct OutputPiece {
  TextDelta delta;
  int32_t token = -1;  // the generated token (-1: none)
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

struct ResponseMeta {
  ResponseMeta() = default;
  // Positional, so ResponseMeta{id, model, created} still builds (the fingerprint unset).
  ResponseMeta(std::string id_in, std::string model_in, int64_t created_in,
               std::string system_fingerprint_in = "")
      : id(std::move(id_in)),
        model(std::move(model_in)),
        created(created_in),
        system_fingerprint(std::move(system_fingerprint_in)) {}

  std::string id;     // "chatcmpl-..." / "cmpl-..."
  std::string model;  // ResponseModelName(the request's model, the served model's id)
  int64_t created = 0;
  // ChatPipeline::fingerprint() ("fp_" + 10 hex digits) on every object and chunk; empty: null.
  std::string system_fingerprint;
};

// The `model` a response names: the request's own spelling when it names the served model
// (the same id, ignoring case, or with an organisation prefix: "Qwen/<id>"), else the served id.
std::string ResponseModelName(const std::string& requested, const std::string& served);

// Holds each shown token's log-probability until the text it spells has been sent, so a token
// whose text a stop string cut (held back, then dropped) never appears in logprobs, streamed or
// not, just as its text never appears in the content. Tokens are matched to text by their
// visible bytes (special tokens have none); a request that ends other than by a stop string
// releases every token still held.
class LogprobGate {
 public:
  explicit LogprobGate(const tok::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // Takes one piece (its token, when shown, and the text it released) and returns the pieces
  // whose tokens are now released, in order, each with the byte offset of its text.
  std::vector<std::pair<size_t, OutputPiece>> Push(const OutputPiece& piece);

 private:
  struct Held {
    size_t start = 0, end = 0;  // the token's visible bytes in the reply's text
    OutputPiece piece;
  };
  const tok::Tokenizer* tokenizer_;
  std::deque<Held> held_;
  size_t token_end_ = 0;  // visible bytes of the tokens so far
  size_t released_ = 0;   // text bytes sent so far
};

class ChatResponder {
 public:
  ChatResponder(const ChatCompletionRequest& request, ResponseMeta meta,
                const tok::Tokenizer* tokenizer);

  // Streaming: the SSE `data:` payloads (JSON texts) this piece produces, in order.
  std::vector<std::string> StreamPiece(const OutputPiece& piece);
  // Streaming, after the last piece: the final chunks (finish chunk, usage chunk). Empty for a
  // request that was cancelled; an error finish yields one {"error": ...} payload.
  std::vector<std::string> StreamEnd();

  // Non-streaming: take every piece, then Completion().
  void Collect(const OutputPiece& piece);
  nlohmann::ordered_json Completion();  // draws the tool calls' ids

  FinishReason finish() const { return finish_; }
  const std::string& error() const { return error_; }
  const Usage& usage() const { return usage_; }

 private:
  nlohmann::ordered_json Chunk(nlohmann::ordered_json delta, nlohmann::ordered_json finish,
                               nlohmann::ordered_json logprobs) const;
  nlohmann::ordered_json ToolCallJson(const ToolCall& c, int index, bool streaming);
  void Record(const OutputPiece& piece);
  nlohmann::ordered_json FinalFinishReason() const;

  ChatCompletionRequest request_;
  ResponseMeta meta_;
  const tok::Tokenizer* tokenizer_;
  std::unique_ptr<ToolCallStream> tools_;  // when tool calls are parsed
  // tool_choice "required" or a named function (enforced): the reply is calls only, so blank
  // text between them is not streamed as content.
  bool calls_only_ = false;
  LogprobGate gate_;
  bool started_ = false;  // the role chunk was sent
  std::string text_;      // non-streaming: the whole text
  std::vector<ToolCall> calls_;
  int streamed_calls_ = 0;
  nlohmann::ordered_json logprobs_ = nlohmann::ordered_json::array();
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  Usage usage_;
};

// The legacy /v1/completions object and chunks ("text_completion").
class CompletionResponder {
 public:
  CompletionResponder(const CompletionRequest& request, ResponseMeta meta,
                      const tok::Tokenizer* tokenizer);
  std::vector<std::string> StreamPiece(const OutputPiece& piece);
  std::vector<std::string> StreamEnd();
  void Collect(const OutputPiece& piece);
  nlohmann::ordered_json Completion() const;
  FinishReason finish() const { return finish_; }
  const std::string& error() const { return error_; }
  const Usage& usage() const { return usage_; }

 private:
  nlohmann::ordered_json Chunk(const std::string& text, nlohmann::ordered_json finish,
                               nlohmann::ordered_json logprobs) const;
  // Legacy logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"} of the pieces.
  nlohmann::ordered_json LegacyLogprobs(const std::vector<OutputPiece>& pieces,
                                        size_t text_start) const;
  void Record(const OutputPiece& piece);

  CompletionRequest request_;
  ResponseMeta meta_;
  const tok::Tokenizer* tokenizer_;
  std::string text_;
  std::vector<OutputPiece> pieces_;  // with logprobs: every released piece, for the legacy object
  LogprobGate gate_;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  Usage usage_;
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_OPENAI_RESPONSE_H_
