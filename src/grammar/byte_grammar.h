// A grammar lowered to bytes, what the matcher's pushdown stacks run on (grammar/matcher.h).
// Private to the grammar layer.
//
// Every alternative of every rule is laid out in one flat array of element codes, each
// alternative followed by an end marker, so a grammar position is one index into that array.
// Rules 0..R-1 are the source grammar's; character classes whose encodings need more than one
// byte sequence get a rule each (one alternative per sequence), the others are inlined as their
// byte sets.
#ifndef VLSTACK_GRAMMAR_BYTE_GRAMMAR_H_
#define VLSTACK_GRAMMAR_BYTE_GRAMMAR_H_

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/utf8_lowering.h"

namespace vls::grammar {

struct ByteGrammar {
  // Element codes: >= 0 a byte set (index into sets), kEnd the end of an alternative,
  // <= kRuleBase a reference to rule (kRuleBase - code).
  static constexpr int32_t kEnd = -1;
  static constexpr int32_t kRuleBase = -2;
  static bool IsSet(int32_t code) { return code >= 0; }
  static bool IsRule(int32_t code) { return code <= kRuleBase; }
  static int32_t RuleOf(int32_t code) { return kRuleBase - code; }
  static int32_t RuleCode(int32_t rule) { return kRuleBase - rule; }

  std::vector<int32_t> elems;       // [positions] element codes
  std::vector<ByteSet> sets;        // deduplicated
  std::vector<int32_t> alt_begin;   // [rules + 1] offsets into alt_starts
  std::vector<int32_t> alt_starts;  // the first position of each alternative, rule by rule
  std::vector<int32_t> rule_of;     // [positions] the rule a position belongs to
  int32_t root = 0;
  int32_t source_rules = 0;

  int32_t rule_count() const { return static_cast<int32_t>(alt_begin.size()) - 1; }
};

// Lowers a validated grammar. Fails (ResourceExhausted) when the lowered form would pass
// limits.max_elements * 4 positions.
StatusOr<ByteGrammar> LowerToBytes(const Grammar& g, const GrammarLimits& limits);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_BYTE_GRAMMAR_H_
