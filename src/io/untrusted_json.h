// Parsing JSON we did not write: model folders, artifact headers, tokenizers, requests.
//
// nlohmann::json as it comes accepts too much and guards too little for input from outside:
// it keeps the last of two equal keys, stops at a NUL byte (so "{}\0garbage" passes), nests as
// deep as the input asks (the parse is iterative, but dump(), copies and comparisons recurse),
// and its typed reads coerce (get<int>() turns 4294967297 into 1, 2.7 into 2 and true into 1) or
// throw. ParseUntrustedJson and the strict readers below are the only way the project reads such
// JSON; every rule is a named limit or check with an error that says what is wrong and where.
//
// Rules ParseUntrustedJson enforces (errors are prefixed with the caller's label):
//   * the text is one JSON value and nothing after it but whitespace (no NUL, no trailing bytes);
//   * arrays and objects nest at most `max_depth` levels (kMaxUntrustedJsonDepth by default);
//   * no key appears twice inside one object;
//   * out of memory while parsing is kResourceExhausted, never an exception.
// Parsing is linear in the input: duplicate keys are found with a hash set per open object.
#ifndef VLSTACK_IO_UNTRUSTED_JSON_H_
#define VLSTACK_IO_UNTRUSTED_JSON_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vls {

// Nesting depth allowed in JSON from outside (config.json, tokenizer.json, requests, headers).
// Hugging Face files nest fewer than 10 levels; chat requests with tool schemas fewer than 20.
inline constexpr int kMaxUntrustedJsonDepth = 64;

struct JsonParseOptions {
  int max_depth = kMaxUntrustedJsonDepth;
  // Status code of a syntax or rule error: kDataLoss for files, kInvalidArgument for requests.
  StatusCode code = StatusCode::kDataLoss;
};

// Parses `text` as one JSON value under the rules above. `label` names the input ("config.json",
// "request line 3") and starts every error message.
Status ParseUntrustedJson(std::string_view label, std::string_view text, nlohmann::json* out,
                          const JsonParseOptions& options = {});
// The same for callers that keep the object key order.
Status ParseUntrustedJson(std::string_view label, std::string_view text,
                          nlohmann::ordered_json* out, const JsonParseOptions& options = {});

// Strict typed reads of one JSON value (`what` names it in the error, e.g. "max_new_tokens").
// Integers must be JSON integers (not 2.7, not true, not "3") within [min, max]; booleans must
// be true or false; strings must be strings. Errors are kInvalidArgument.
template <typename BasicJson>
Status ReadJsonInt(const BasicJson& v, std::string_view what, int64_t min, int64_t max,
                   int64_t* out);
template <typename BasicJson>
Status ReadJsonBool(const BasicJson& v, std::string_view what, bool* out);
template <typename BasicJson>
Status ReadJsonString(const BasicJson& v, std::string_view what, std::string* out);
// Any JSON number (integer or not) as a finite double within [min, max].
template <typename BasicJson>
Status ReadJsonNumber(const BasicJson& v, std::string_view what, double min, double max,
                      double* out);

// The JSON type of `v` in words ("an integer", "a string", "null"), for error messages.
template <typename BasicJson>
std::string JsonTypeName(const BasicJson& v);

// A short rendering of `v` for an error message: at most `max_chars` bytes, invalid UTF-8
// replaced, never throws.
template <typename BasicJson>
std::string JsonSnippet(const BasicJson& v, size_t max_chars = 60);

// Serialises `v` compactly with invalid UTF-8 in strings replaced by U+FFFD, so text that came
// from outside (or an error message cut inside a character) can never make the writer throw.
template <typename BasicJson>
std::string DumpJsonSafe(const BasicJson& v, int indent = -1);

}  // namespace vls

#endif  // VLSTACK_IO_UNTRUSTED_JSON_H_
