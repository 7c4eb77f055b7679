// The tokenizer.json "pre_tokenizer": Split regexes (PCRE2 with Unicode properties) followed by
// the ByteLevel step, as Qwen2/Qwen3 ship it.
#ifndef VLSTACK_TOKENIZER_PRETOKENIZER_H_
#define VLSTACK_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vls::tok {

// One compiled regex whose matches and gaps become separate pieces ("Isolated" behaviour).
// Thread safety: immutable after Compile; Split may be called from any thread.
class SplitRegex {
 public:
  // `pattern` uses Oniguruma syntax as tokenizers does; \s and \S are rewritten to Oniguruma's
  // White_Space set (PCRE2 omits U+0085 from \s).
  static StatusOr<std::unique_ptr<SplitRegex>> Compile(std::string_view pattern);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // Appends the pieces of `text` to `out`, in order; their concatenation is `text`.
  // REQUIRES: text is valid UTF-8.
  Status Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  SplitRegex() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rewrites \s and \S for PCRE2 (exposed for tests).
StatusOr<std::string> TranslateOnigPattern(std::string_view pattern);

// Thread safety: immutable after FromJson.
class PreTokenizer {
 public:
  // Accepts Split(Regex, behavior "Isolated", invert false) steps followed by one
  // ByteLevel(add_prefix_space false) step, alone or in (nested) "Sequence"s within
  // kMaxPipelineSteps and kMaxSequenceNesting; patterns of at most kMaxSplitRegexBytes. Refuses
  // the rest by name.
  static StatusOr<PreTokenizer> FromJson(const nlohmann::json& j);

  // Pieces of raw bytes that the BPE model encodes one by one.
  Status Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  std::vector<std::shared_ptr<const SplitRegex>> splits_;
};

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_PRETOKENIZER_H_
