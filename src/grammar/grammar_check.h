// Internal to the grammar layer: ValidateGrammar with the rule at fault, so that a front end can
// point at the source text of that rule (gbnf.cc names its line and column).
#ifndef VLSTACK_GRAMMAR_GRAMMAR_CHECK_H_
#define VLSTACK_GRAMMAR_GRAMMAR_CHECK_H_

#include <cstdint>

#include "base/status.h"
#include "grammar/grammar.h"

namespace vls::grammar {

// ValidateGrammar; on an error about one rule, *rule_at_fault is its index (else -1).
Status ValidateGrammarAt(const Grammar& g, const GrammarLimits& limits, int32_t* rule_at_fault);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_GRAMMAR_CHECK_H_
