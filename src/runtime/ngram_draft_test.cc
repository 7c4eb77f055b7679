#include "runtime/ngram_draft.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/sampler.h"

namespace vls {
namespace {

using V = std::vector<int32_t>;

SpeculativeParams Params(int k, int max_n = 3, int min_n = 1) {
  SpeculativeParams p;
  p.draft_tokens = k;
  p.max_ngram = max_n;
  p.min_ngram = min_n;
  return p;
}

TEST(NgramDraftTest, LongestSuffixWinsOverAMoreRecentShorterMatch) {
  // Suffix "1 2 3": the 3-gram occurs at the start (followed by 4 5); the 1-gram "3" also occurs
  // later (followed by 9), but the longest match wins.
  const V prompt = {1, 2, 3, 4, 5, 3, 9, 1, 2, 3};
  EXPECT_EQ(DraftNgram(prompt, {}, Params(2), 2), (V{4, 5}));
  // Limited to 2-grams, "2 3" has the same single occurrence.
  EXPECT_EQ(DraftNgram(prompt, {}, Params(2, 2), 2), (V{4, 5}));
}

TEST(NgramDraftTest, MostRecentOccurrenceWins) {
  const V prompt = {7, 1, 2, 7, 3, 4, 7};
  EXPECT_EQ(DraftNgram(prompt, {}, Params(2), 2), (V{3, 4}));
}

TEST(NgramDraftTest, ReadsAcrossPromptAndGeneratedAndThroughItsOwnDraft) {
  // Sequence 5 6 | 5 6 5: the suffix "6 5" occurs at [1, 3), followed by 6 5 and then, past
  // the end, by the draft itself (period 2).
  EXPECT_EQ(DraftNgram(V{5, 6}, V{5, 6, 5}, Params(5), 5), (V{6, 5, 6, 5, 6}));
  // A constant chain drafts the constant.
  EXPECT_EQ(DraftNgram(V{3}, V{8, 8}, Params(4), 4), (V{8, 8, 8, 8}));
}

TEST(NgramDraftTest, NoMatchOrNoRoomGivesNothing) {
  EXPECT_TRUE(DraftNgram(V{1, 2, 3, 4}, {}, Params(4), 4).empty());
  EXPECT_TRUE(DraftNgram(V{1, 1}, {}, Params(4), 0).empty());
  EXPECT_TRUE(DraftNgram(V{1}, {}, Params(4), 4).empty());
  // min_ngram 2: the 1-gram match does not count.
  EXPECT_TRUE(DraftNgram(V{4, 1, 2, 1}, {}, Params(4, 3, 2), 4).empty());
  EXPECT_EQ(DraftNgram(V{4, 1, 2, 1}, {}, Params(4), 1), (V{2}));
}

TEST(NgramDraftTest, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateSpeculativeParams(Params(8)).ok());
  EXPECT_TRUE(ValidateSpeculativeParams(Params(0)).ok());
  EXPECT_FALSE(ValidateSpeculativeParams(Params(-1)).ok());
  EXPECT_FALSE(ValidateSpeculativeParams(Params(kMaxDraftTokens + 1)).ok());
  EXPECT_FALSE(ValidateSpeculativeParams(Params(8, 2, 3)).ok());
  EXPECT_FALSE(ValidateSpeculativeParams(Params(8, 3, 0)).ok());
  EXPECT_FALSE(ValidateSpeculativeParams(Params(8, kMaxNgram + 1)).ok());
}

}  // namespace
}  // namespace vls
