#include "cli/speculative_flags.h"

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "runtime/model_draft.h"

namespace vls::cli {

namespace {

// The parts of a tokenizer.json that map text to ids: the model (vocabulary, merges) and the
// added tokens. Null when the folder has no tokenizer.json.
StatusOr<nlohmann::json> TokenizerIdentity(const std::string& dir) {
  const std::string path = JoinPath(dir, "tokenizer.json");
  StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return nlohmann::json();
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("'" + path + "' is not a JSON object");
  }
  return nlohmann::json{{"model", j.value("model", nlohmann::json())},
                        {"added_tokens", j.value("added_tokens", nlohmann::json())}};
}
}  // namespace

const std::set<std::string>& SpeculativeFlagNames() {
  static const std::set<std::string> names = {"speculate", "draft-tokens", "draft-model"};
  return names;
}

std::string SpeculativeFlagsHelp() {
  return "  --speculate M        speculative decoding: off (default), ngram (prompt lookup: "
         "draft\n"
         "                       the tokens that followed the latest earlier match of the last\n"
         "                       1-3 tokens) or draft (a smaller model of the same tokenizer,\n"
         "                       --draft-model, drafts greedily); the drafts are verified in one\n"
         "                       pass; greedy output unchanged, sampled output from the same\n"
         "                       distribution (docs/speculative.md)\n"
         "  --draft-tokens K     most drafted tokens per verify pass (default " +
         std::to_string(kDefaultDraftTokens) + ", at most " + std::to_string(kMaxDraftTokens) +
         ")\n"
         "  --draft-model DIR    the draft model's folder (without --speculate: draft); loaded\n"
         "                       with the model's precision, threads, slots and capacity; with\n"
         "                       --speculate off or ngram, requests may still choose it\n";
}

Status ApplySpeculativeFlags(const Args& args, SpeculativeParams* p) {
  const std::string mode =
      args.Get("speculate").value_or(args.Has("draft-model") ? "draft" : "off");
  if (mode != "off" && mode != "ngram" && mode != "draft") {
    return InvalidArgument("--speculate: '" + mode + "' is not off, ngram or draft");
  }
  if (mode == "draft" && !args.Has("draft-model")) {
    return InvalidArgument("--speculate draft needs --draft-model DIR");
  }
  if (mode == "off") {
    if (args.Has("draft-tokens")) {
      return InvalidArgument("--draft-tokens needs --speculate ngram or draft");
    }
    *p = SpeculativeParams();
    return Status::Ok();
  }
  VLS_ASSIGN_OR_RETURN(long long k,
                       args.Int("draft-tokens", kDefaultDraftTokens, 1, kMaxDraftTokens));
  *p = SpeculativeParams();
  p->draft_tokens = static_cast<int>(k);
  p->source = mode == "draft" ? DraftSource::kModel : DraftSource::kNgram;
  return ValidateSpeculativeParams(*p);
}

StatusOr<std::unique_ptr<LoadedModel>> LoadDraftModel(const Args& args,
                                                      const std::string& model_dir,
                                                      const LoadedModel& model,
                                                      LoadOptions options) {
  const std::optional<std::string> dir = args.Get("draft-model");
  if (!dir) return std::unique_ptr<LoadedModel>();
  auto fail = [](const Status& s) { return s.WithContext("--draft-model"); };
  auto mine = TokenizerIdentity(model_dir);
  auto theirs = TokenizerIdentity(*dir);
  if (!mine.ok()) return fail(mine.status());
  if (!theirs.ok()) return fail(theirs.status());
  if (!mine->is_null() && !theirs->is_null() && *mine != *theirs) {
    return fail(InvalidArgument("'" + *dir +
                                "' has another tokenizer (tokenizer.json's vocabulary, merges or "
                                "added tokens differ from the model's)"));
  }
  options.artifact.clear();  // an artifact is compiled for one model
  auto draft = LoadedModel::Load(*dir, options);
  if (!draft.ok()) return fail(draft.status());
  if (Status s = CheckDraftModel(model, **draft, model.bounds().slots); !s.ok()) return fail(s);
  return std::move(*draft);
}

}  // namespace vls::cli
