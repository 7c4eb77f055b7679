// --speculate and --draft-tokens, shared by run, batch, serve and bench (docs/speculative.md).
#ifndef VLSTACK_CLI_SPECULATIVE_FLAGS_H_
#define VLSTACK_CLI_SPECULATIVE_FLAGS_H_

#include <set>
#include <string>

#include "cli/args.h"
#include "runtime/ngram_draft.h"

namespace vls::cli {

// The value flags ApplySpeculativeFlags reads.
const std::set<std::string>& SpeculativeFlagNames();

// Their --help lines.
std::string SpeculativeFlagsHelp();

// --speculate off|ngram (default off) and --draft-tokens K (default 8, in [1, 64]; only with
// ngram). Errors name the flag.
Status ApplySpeculativeFlags(const Args& args, SpeculativeParams* p);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_SPECULATIVE_FLAGS_H_
