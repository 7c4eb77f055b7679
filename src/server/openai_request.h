// OpenAI request bodies -> the request pipeline's ChatRequest (docs/contracts.md §7).
//
// /v1/chat/completions takes OpenAI's fields and vLLM's extras; the server-level ones are read
// here (model, stream, stream_options, n, logprobs as a boolean with top_logprobs, tool_choice,
// max_completion_tokens, and the accepted-and-ignored user, metadata, store,
// parallel_tool_calls, service_tier), the rest by ChatRequestFromJson (runtime/chat_json.h),
// which refuses an unknown field by name. /v1/completions takes a raw prompt (a string, a list
// of one string, token ids or a list of one list of token ids).
//
// Structured output (docs/structured_output.md): response_format (text, json_object,
// json_schema with strict), tools with "strict": true, tool_choice "required" or a named
// function, and the extras json_schema (llama-server, vLLM), grammar (GBNF, llama-server) and
// regex (vLLM) are read by ChatRequestFromJson through StructuredOutputFromJson
// (runtime/structured_output_json.h), the reader the C ABI shares, into ChatRequest::structured;
// the pipeline compiles it (ChatPipeline::Prepare), so a schema keyword outside the subset is
// refused there, with the field as param. /v1/completions takes the same fields but tools and
// tool_choice.
//
// Every refusal is a Status whose param() names the offending field ("messages[1].role"), for a
// 400 answer (ErrorFromStatus). A message's role must be system, developer (the system prompt
// by its newer name), user, assistant or tool; a content part must say its "type".
//
// Video parts ({"type": "video_url", "video_url": {"url": SRC}} as vLLM takes them, or
// {"type": "video", "video": SRC}) are checked for shape here, with their optional "fps",
// "max_frames" and "num_frames" within RequestLimits' video bounds (the param names the part's
// field: "messages[0].content[1].fps"); vLLM's "mm_processor_kwargs": {"fps", "max_frames",
// "num_frames"} becomes ChatRequest::video, the default of every video part. Decoding them is
// the pipeline's (ChatPipeline::Prepare).
#ifndef VLSTACK_SERVER_OPENAI_REQUEST_H_
#define VLSTACK_SERVER_OPENAI_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "runtime/chat_pipeline.h"
#include "runtime/sampler.h"

namespace vls::server {

// Request limits the server enforces before any work (serve's flags).
struct RequestLimits {
  size_t max_messages = 1024;  // messages in one chat request
  size_t max_images = 16;      // image and video parts in one chat request
  // Bounds on a video's sampling options, per part or in mm_processor_kwargs (serve's
  // --video-max-fps and --video-max-frames; the ImageEncoderOptions of the same names).
  double max_video_fps = 60.0;
  int max_video_frames = 768;
  size_t max_tools = 256;  // tool schemas in one request
  size_t max_stop = 16;    // stop strings
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ChatCompletionRequest {
  ChatRequest chat;   // tools already dropped when tool_choice is "none"
  std::string model;  // as the client named it (empty when absent)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // with kNamed
  // Tool calls in the reply are parsed (tools given and tool_choice is not "none").
  bool parse_tool_calls() const {
    return !chat.tools.is_null() && tool_choice != ToolChoice::kNone;
  }
};

struct CompletionRequest {
  ChatRequest params;                          // sampling, limits, stop (messages unused)
  std::optional<std::string> prompt;           // a text prompt, or
  std::optional<std::vector<int32_t>> tokens;  // token ids
  std::string model;
  bool stream = false;
  bool include_usage = false;
  int logprobs = -1;  // legacy completions: the number of top log-probabilities (0..5), -1 none
};

// An error to answer with: HTTP status and the OpenAI error object's fields.
struct OpenAiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// A Status from the pipeline as the HTTP error it stands for (InvalidArgument, OutOfRange,
// NotFound of a request part, Unimplemented -> 400; ResourceExhausted (capacity: the queue is
// full) -> 429; FailedPrecondition (draining) -> 503; others -> 500), with `param` the status's
// param() (set where the field was refused; never parsed from the message). A prompt that does
// not fit (OutOfRange naming "messages" or "prompt") has code "context_length_exceeded".
OpenAiError ErrorFromStatus(const Status& status);

StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(const nlohmann::ordered_json& body,
                                                           const SamplingParams& defaults,
                                                           const RequestLimits& limits);
StatusOr<CompletionRequest> ParseCompletionRequest(const nlohmann::ordered_json& body,
                                                   const SamplingParams& defaults,
                                                   const RequestLimits& limits);

}  // namespace vls::server

#endif  // VLSTACK_SERVER_OPENAI_REQUEST_H_
