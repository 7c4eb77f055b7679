#include "cli/speculative_flags.h"

namespace vls::cli {

namespace {
constexpr int kDefaultDraftTokens = 8;
}  // namespace

const std::set<std::string>& SpeculativeFlagNames() {
  static const std::set<std::string> names = {"speculate", "draft-tokens"};
  return names;
}

std::string SpeculativeFlagsHelp() {
  return "  --speculate M        speculative decoding: off (default) or ngram (prompt lookup: "
         "draft\n"
         "                       the tokens that followed the latest earlier match of the last\n"
         "                       1-3 tokens, verify them in one pass; greedy output unchanged,\n"
         "                       sampled output from the same distribution; docs/speculative.md)\n"
         "  --draft-tokens K     most drafted tokens per verify pass with --speculate ngram\n"
         "                       (default " +
         std::to_string(kDefaultDraftTokens) + ", at most " + std::to_string(kMaxDraftTokens) +
         ")\n";
}

Status ApplySpeculativeFlags(const Args& args, SpeculativeParams* p) {
  const std::string mode = args.Get("speculate").value_or("off");
  if (mode != "off" && mode != "ngram") {
    return InvalidArgument("--speculate: '" + mode + "' is not off or ngram");
  }
  if (mode == "off") {
    if (args.Has("draft-tokens")) {
      return InvalidArgument("--draft-tokens needs --speculate ngram");
    }
    *p = SpeculativeParams();
    return Status::Ok();
  }
  VLS_ASSIGN_OR_RETURN(long long k,
                       args.Int("draft-tokens", kDefaultDraftTokens, 1, kMaxDraftTokens));
  *p = SpeculativeParams();
  p->draft_tokens = static_cast<int>(k);
  return ValidateSpeculativeParams(*p);
}

}  // namespace vls::cli
