// A chat request as one JSON object (the C ABI's vls_batch_submit_chat and `vlstack run`'s
// building block; the server maps the OpenAI fields onto the same ChatRequest):
//
//   {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?, "enable_thinking": bool?,
//    "chat_template_kwargs": {...}?, "max_tokens": int?, "temperature": num?, "top_p": num?,
//    "top_k": int?, "min_p": num?, "repetition_penalty": num?, "presence_penalty": num?,
//    "frequency_penalty": num?, "seed": uint?, "stop": string | [string]?,
//    "stop_token_ids": [int]?, "ignore_eos": bool?, "logprobs": int?,
//    "logit_bias": {"<token id>": num}?,
//    "speculative": {"method": "off" | "ngram" | "draft", "draft_tokens": int?}?,
//    "tool_choice": "none" | "auto" | "required" | {"type": "function", "function": {"name"}}?,
//    "response_format": {"type": "text" | "json_object" | "json_schema", ...}?,
//    "json_schema": {...}?, "grammar": string?, "regex": string?}
//
// The last five and "tools" ask for structured output (ChatRequest::structured), read by
// StructuredOutputFromJson (structured_output_json.h has their forms and rules: at most one of
// response_format, json_schema, grammar and regex; strict tools, "required" and a named
// function enforce the tool calls); tool_choice "none" also hides the tools from the template.
//
// Sampling fields that are absent (or null) keep `defaults` (the model's generation_config).
// Every field is read strictly (integers are JSON integers in range, booleans true or false,
// numbers finite); an unknown field is refused by name, so a typo never silently changes
// nothing. logit_bias keys are token ids written in decimal without a sign or leading zeros.
#ifndef VLSTACK_RUNTIME_CHAT_JSON_H_
#define VLSTACK_RUNTIME_CHAT_JSON_H_

#include <nlohmann/json.hpp>
#include <string_view>

#include "base/status.h"
#include "io/untrusted_json.h"
#include "runtime/chat_pipeline.h"

namespace vls {

// ParseUntrustedJson's rules (no NUL or trailing bytes, nesting bound, no repeated key) into an
// ordered_json, in time linear in the input. nlohmann's own ordered_json parse searches the keys
// already read for every key it inserts (ordered_map is a vector), which made a request with
// 100,000 keys take seconds; this builds each object by appending, after the rules have
// refused repeated keys. For chat requests, whose key order the template sees.
Status ParseUntrustedOrderedJson(std::string_view label, std::string_view text,
                                 nlohmann::ordered_json* out, const JsonParseOptions& options = {});

// {"method": "off" | "ngram" | "draft", "draft_tokens": 1..64?} (draft_tokens 8 when absent;
// "off" takes none): a request's speculative decoding. Errors start with "\"speculative\"".
Status SpeculativeFromJson(const nlohmann::ordered_json& v, SpeculativeParams* out);

StatusOr<ChatRequest> ChatRequestFromJson(const nlohmann::ordered_json& j,
                                          const SamplingParams& defaults);
// Parses `text` first with ParseUntrustedOrderedJson (InvalidArgument names the parse failure).
StatusOr<ChatRequest> ChatRequestFromJsonText(std::string_view text,
                                              const SamplingParams& defaults);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_CHAT_JSON_H_
