// Prompt-lookup (n-gram) drafting for speculative decoding (docs/speculative.md): no second
// model; the draft is what followed the most recent earlier occurrence of the sequence's
// longest matching suffix, in the prompt and the tokens generated so far.
#ifndef VLSTACK_RUNTIME_NGRAM_DRAFT_H_
#define VLSTACK_RUNTIME_NGRAM_DRAFT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace vls {

// Where drafts come from: prompt lookup, or the engine's draft model (runtime/model_draft.h).
enum class DraftSource : int { kNgram = 0, kModel = 1 };
const char* DraftSourceName(DraftSource s);  // "ngram" / "draft"

// How a request speculates. draft_tokens == 0: plain decoding.
struct SpeculativeParams {
  int draft_tokens = 0;  // most drafted tokens per verify pass (k)
  DraftSource source = DraftSource::kNgram;
  int max_ngram = 3;  // the longest suffix matched
  int min_ngram = 1;  // the shortest suffix matched
};

inline constexpr int kMaxDraftTokens = 64;
inline constexpr int kDefaultDraftTokens = 8;  // the CLI's and the request JSON's default
inline constexpr int kMaxNgram = 16;

// 0 <= draft_tokens <= kMaxDraftTokens, 1 <= min_ngram <= max_ngram <= kMaxNgram.
Status ValidateSpeculativeParams(const SpeculativeParams& p);

// The sequence is prompt followed by generated. For n from max_ngram down to min_ngram: when
// the sequence's last n tokens occur earlier in it, the draft is the `limit` tokens that
// followed their most recent earlier occurrence (reading on into the draft itself where that
// passes the end of the sequence); the first n that matches wins. Empty when nothing matches
// or limit <= 0. Cost: O(sequence length · max_ngram).
std::vector<int32_t> DraftNgram(std::span<const int32_t> prompt, std::span<const int32_t> generated,
                                const SpeculativeParams& params, int limit);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_NGRAM_DRAFT_H_
