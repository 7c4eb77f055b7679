// Internal to the grammar layer: the regular-expression front end split in two (regex.cc parses,
// json_schema_regex.cc builds) and in the two modes the JSON Schema front end needs (a string's
// `pattern` and its `format` shapes). Not a public header.
#ifndef VLSTACK_GRAMMAR_JSON_SCHEMA_REGEX_H_
#define VLSTACK_GRAMMAR_JSON_SCHEMA_REGEX_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace vls::grammar {

struct RegexMode {
  // Each character of the pattern is written as it appears inside a JSON string: raw, except
  // '"' and '\' (only as \" and \\) and control characters (only as \b \f \n \r \t or \u00XX);
  // '/' also as \/. Other \uXXXX spellings of a character are not accepted.
  bool json_string = false;
  // ECMA-262 search semantics (JSON Schema's `pattern`): a top-level branch without ^ may be
  // preceded, and one without $ followed, by any text. Off: the whole text must match.
  bool search = false;
};

// A parsed pattern (regex.cc): a tree of character classes, sequences, alternations and
// counted repetitions.
struct RegexNode {
  enum class Kind : uint8_t { kEmpty, kChars, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  CharClass chars;              // kChars: normalised, never empty
  std::vector<RegexNode> kids;  // kSeq, kAlt: the parts; kRepeat: the one repeated
  int min = 1;                  // kRepeat: x{min,max}
  int max = 1;                  // -1: unbounded
};

RegexNode RegexChars(CharClass c);
CharClass RegexAnyClass();  // every code point

// Parses `pattern` into its top-level branches, each with whether it starts with ^ and ends
// with $. Errors name the offset (and the limit).
Status ParseRegex(std::string_view pattern, const GrammarLimits& limits,
                  std::vector<RegexNode>* branches, std::vector<std::pair<bool, bool>>* anchors);

// AddRegexRule with a mode (AddRegexRule is this with RegexMode{}).
StatusOr<int32_t> AddRegexRuleWithMode(GrammarBuilder* builder, std::string_view pattern,
                                       std::string_view rule_name, const GrammarLimits& limits,
                                       const RegexMode& mode);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_JSON_SCHEMA_REGEX_H_
