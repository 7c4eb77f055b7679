#include "runtime/ngram_draft.h"

#include <algorithm>

namespace vls {

const char* DraftSourceName(DraftSource s) { return s == DraftSource::kModel ? "draft" : "ngram"; }

Status ValidateSpeculativeParams(const SpeculativeParams& p) {
  if (p.draft_tokens < 0 || p.draft_tokens > kMaxDraftTokens) {
    return InvalidArgument("speculative.draft_tokens: must be in [0, " +
                           std::to_string(kMaxDraftTokens) + "], got " +
                           std::to_string(p.draft_tokens));
  }
  if (p.source != DraftSource::kNgram && p.source != DraftSource::kModel) {
    return InvalidArgument("speculative.source: unknown draft source " +
                           std::to_string(static_cast<int>(p.source)));
  }
  if (p.min_ngram < 1 || p.max_ngram < p.min_ngram || p.max_ngram > kMaxNgram) {
    return InvalidArgument("speculative: n-gram sizes must satisfy 1 <= min_ngram (" +
                           std::to_string(p.min_ngram) + ") <= max_ngram (" +
                           std::to_string(p.max_ngram) + ") <= " + std::to_string(kMaxNgram));
  }
  return Status::Ok();
}

std::vector<int32_t> DraftNgram(std::span<const int32_t> prompt, std::span<const int32_t> generated,
                                const SpeculativeParams& params, int limit) {
  const auto P = static_cast<int64_t>(prompt.size());
  const int64_t T = P + static_cast<int64_t>(generated.size());
  auto at = [&](int64_t i) {
    return i < P ? prompt[static_cast<size_t>(i)] : generated[static_cast<size_t>(i - P)];
  };
  std::vector<int32_t> draft;
  if (limit <= 0) return draft;
  for (int64_t n = std::min<int64_t>(params.max_ngram, T - 1); n >= params.min_ngram; --n) {
    // Occurrences ending at e (the n tokens [e - n, e)), most recent first; the suffix itself
    // ends at T and is skipped.
    for (int64_t e = T - 1; e >= n; --e) {
      int64_t j = 0;
      while (j < n && at(e - 1 - j) == at(T - 1 - j)) ++j;
      if (j < n) continue;
      // Past the end of the sequence the continuation reads the draft itself (a match at
      // distance d drafts the last d tokens periodically, so a repeating pattern fills k).
      for (int64_t i = e; static_cast<int>(draft.size()) < limit; ++i) {
        draft.push_back(i < T ? at(i) : draft[static_cast<size_t>(i - T)]);
      }
      return draft;
    }
  }
  return draft;
}

}  // namespace vls
