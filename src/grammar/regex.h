// Regular expressions as grammars: the subset JSON Schema's `pattern` and the `regex` request
// field take (docs/structured_output.md lists it). The whole text must match (as if anchored at
// both ends; a leading ^ and trailing $ are accepted and mean the same). Matching is by the
// grammar matcher, a pushdown automaton over the input, so there is no backtracking to blow up;
// sizes are bounded by GrammarLimits before anything is expanded.
#ifndef VLSTACK_GRAMMAR_REGEX_H_
#define VLSTACK_GRAMMAR_REGEX_H_

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace vls::grammar {

// Adds a rule matching exactly the strings of `pattern` to `builder`; returns its id. Errors name
// the pattern offset and the construct (e.g. a backreference or lookaround, which no pushdown
// grammar can express, is refused by name).
StatusOr<int32_t> AddRegexRule(GrammarBuilder* builder, std::string_view pattern,
                               std::string_view rule_name, const GrammarLimits& limits);

// A whole grammar whose root is the pattern; validated.
StatusOr<Grammar> RegexToGrammar(std::string_view pattern, const GrammarLimits& limits);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_REGEX_H_
