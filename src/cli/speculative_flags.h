// --speculate, --draft-tokens and --draft-model, shared by run, batch, serve and bench
// (docs/speculative.md).
#ifndef VLSTACK_CLI_SPECULATIVE_FLAGS_H_
#define VLSTACK_CLI_SPECULATIVE_FLAGS_H_

#include <memory>
#include <set>
#include <string>

#include "cli/args.h"
#include "runtime/loaded_model.h"
#include "runtime/ngram_draft.h"

namespace vls::cli {

// The value flags ApplySpeculativeFlags reads.
const std::set<std::string>& SpeculativeFlagNames();

// Their --help lines.
std::string SpeculativeFlagsHelp();

// --speculate off|ngram|draft (default off; draft when only --draft-model is given),
// --draft-tokens K (default 8, in [1, 64]; not with off) and --draft-model DIR (required by
// draft; with off or ngram it stays available to requests that ask for it). Errors name the
// flag.
Status ApplySpeculativeFlags(const Args& args, SpeculativeParams* p);

// The --draft-model folder loaded for an engine on `model` (from `model_dir`) with `options`
// (the model's own: precision, threads, slots, capacity; never its artifact): its
// tokenizer.json must map text to the same ids as the model's, and CheckDraftModel must pass.
// Null without --draft-model. Errors name --draft-model.
StatusOr<std::unique_ptr<LoadedModel>> LoadDraftModel(const Args& args,
                                                      const std::string& model_dir,
                                                      const LoadedModel& model,
                                                      LoadOptions options);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_SPECULATIVE_FLAGS_H_
