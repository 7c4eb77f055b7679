// GBNF grammars, llama.cpp's syntax, so that existing grammars work unchanged
// (docs/structured_output.md lists the syntax): `name ::= alternatives`, `|`, grouping with
// parentheses, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, string literals "..." with escapes
// (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character classes [...] and [^...] with ranges and
// the same escapes, `.` (any character), comments from `#` to the end of the line, rule names of
// letters, digits and '-'. The root rule is "root".
#ifndef VLSTACK_GRAMMAR_GBNF_H_
#define VLSTACK_GRAMMAR_GBNF_H_

#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace vls::grammar {

// Parses and validates (ValidateGrammar). Errors name the line and column and what is wrong
// (an undefined rule, a missing root, left recursion, a bound of `limits`).
StatusOr<Grammar> ParseGbnf(std::string_view text, const GrammarLimits& limits);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_GBNF_H_
