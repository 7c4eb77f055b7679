// Draft-model speculative decoding in the batch engine (docs/speculative.md): a second model
// drafts greedily, the engine verifies in its shared decode pass. Greedy tokens equal plain
// decoding whatever the draft model is; sampled tokens keep plain sampling's distribution;
// nothing the draft model lacks or does fails a request.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"
#include "runtime/spec_test_util.h"

namespace vls {
namespace {

TestModelSpec Untied(uint64_t seed, int layers) {
  TestModelSpec spec;
  spec.deepstack = 2;
  spec.tied = false;
  spec.dtype = DType::kF32;
  spec.seed = seed;
  spec.layers = std::max(layers, 2);  // DeepStack needs two language layers
  return spec;
}

std::vector<GenerationRequest> TextPrompts(int max_new) {
  return {Text({1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, 0, max_new), Text({9, 8, 7}, -2, max_new),
          Text({5, 6, 7, 8, 9, 10, 11}, 3, max_new), Text({42, 42, 42, 42}, 0, max_new)};
}

EngineOptions DraftOptions(const LoadedModel* draft, int k) {
  EngineOptions o;
  o.speculative = Spec(k, DraftSource::kModel);
  o.draft_model = draft;
  return o;
}

// The target itself as its own draft model: the draft session computes exactly the rows the
// verify pass computes (each row's operations are independent of the others in a pass), so every
// drafted token is the target's argmax and is accepted.
TEST(DraftModelTest, TheTargetAsItsOwnDraftIsAlwaysAccepted) {
  auto lm = LoadModel("draft_self", 4, 64);
  ASSERT_TRUE(lm);
  const std::vector<GenerationRequest> reqs = TextPrompts(20);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result one = RunAll(*lm, {reqs[i]}, DraftOptions(lm.get(), 5));
    EXPECT_EQ(one.by_id.at(one.ids[0]).tokens, GreedyAlone(*lm, reqs[i])) << "request " << i;
  }
  const Result all = RunAll(*lm, reqs, DraftOptions(lm.get(), 5));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(all.by_id.at(all.ids[i]).tokens, GreedyAlone(*lm, reqs[i])) << "batched " << i;
    EXPECT_EQ(all.by_id.at(all.ids[i]).finish, FinishReason::kLength);
  }
  const EngineCounters& c = all.counters;
  EXPECT_GT(c.draft_tokens, 0u);
  EXPECT_EQ(c.accepted_draft_tokens, c.draft_tokens);
  // 4 x 20 tokens: the first of each comes from its prefill, the rest from passes of up to 6.
  EXPECT_EQ(c.generated_tokens, 80u);
  EXPECT_LE(c.verify_passes, 4u * 4u);
}

// A different, smaller model drafts mostly wrong tokens: the output is still the target's greedy
// chain, beside prompt-lookup, plain and image (DeepStack) requests in the same passes, and with
// a draft cache smaller than the target's.
TEST(DraftModelTest, AnotherModelsDraftsLeaveGreedyTokensUnchanged) {
  auto lm = LoadModel("draft_target", 5, 64);
  auto draft = LoadSpecCheckpoint("draft_small", Untied(17, 2), 5, 24);
  ASSERT_TRUE(lm && draft);
  std::vector<GenerationRequest> reqs = TextPrompts(24);
  reqs[1].speculative = Spec(4);              // prompt lookup
  reqs[2].speculative = SpeculativeParams();  // plain
  reqs.push_back(Image(*lm, 3, true, 24));    // drafted from its ids
  const Result all = RunAll(*lm, reqs, DraftOptions(draft.get(), 4));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(all.by_id.at(all.ids[i]).tokens, GreedyAlone(*lm, reqs[i])) << "request " << i;
  }
  EXPECT_GT(all.counters.draft_tokens, 0u);
  EXPECT_LT(all.counters.accepted_draft_tokens, all.counters.draft_tokens);
}

// The draft window adapts: a draft model that is almost always wrong drafts one token per pass
// after its first rejection (8, then 1), where a fixed window would draft 8 every pass; the
// target as its own draft keeps the whole window.
TEST(DraftModelTest, RejectionsShrinkTheDraftWindow) {
  auto lm = LoadModel("draft_window_target", 1, 64);
  auto wrong = LoadSpecCheckpoint("draft_window_wrong", Untied(43, 2), 1, 64);
  ASSERT_TRUE(lm && wrong);
  const GenerationRequest r = Text({5, 6, 7, 8, 9, 10, 11}, 0, 40);
  const Result bad = RunAll(*lm, {r}, DraftOptions(wrong.get(), 8));
  const EngineCounters& c = bad.counters;
  EXPECT_EQ(bad.by_id.at(bad.ids[0]).tokens, GreedyAlone(*lm, r));
  ASSERT_GT(c.verify_passes, 20u);
  const uint64_t rejected = c.draft_tokens - c.accepted_draft_tokens;
  // 8 in the first pass, then 1 a pass; each accepted draft may widen the window by 2 more.
  EXPECT_LE(c.draft_tokens, 8 + (c.verify_passes - 1) + 2 * c.accepted_draft_tokens)
      << c.draft_tokens << " drafted, " << rejected << " rejected in " << c.verify_passes
      << " passes";
  const Result good = RunAll(*lm, {r}, DraftOptions(lm.get(), 8));
  EXPECT_EQ(good.by_id.at(good.ids[0]).tokens, GreedyAlone(*lm, r));
  EXPECT_EQ(good.counters.accepted_draft_tokens, good.counters.draft_tokens);
  EXPECT_LE(good.counters.verify_passes, 5u);  // 39 tokens after the first, 9 a pass
}

// Prompts the draft model cannot take (embedding rows without ids; longer than its cache) decode
// without model drafts, with the same tokens.
TEST(DraftModelTest, PromptsTheDraftCannotTakeDecodePlainly) {
  auto lm = LoadModel("draft_plain_target", 2, 64);
  auto draft = LoadSpecCheckpoint("draft_plain_small", Untied(23, 2), 2, 8);
  ASSERT_TRUE(lm && draft);
  GenerationRequest no_ids = Image(*lm, 4, false, 8);
  no_ids.tokens.clear();
  GenerationRequest too_long = Text({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, 8);
  const Result run = RunAll(*lm, {no_ids, too_long}, DraftOptions(draft.get(), 4));
  EXPECT_EQ(run.by_id.at(run.ids[0]).tokens, GreedyAlone(*lm, no_ids));
  EXPECT_EQ(run.by_id.at(run.ids[1]).tokens, GreedyAlone(*lm, too_long));
  EXPECT_EQ(run.counters.draft_tokens, 0u);
  EXPECT_EQ(run.counters.generated_tokens, 16u);
}

// Sampled requests: the emitted tokens have plain sampling's distribution (rejection sampling
// against a deterministic draft), checked on the second and third tokens.
TEST(DraftModelTest, SampledTokensKeepTheDistributionOfPlainSampling) {
  auto lm = LoadModel("draft_sampled", 8, 32, kernels::Precision::kF32, true);
  ASSERT_TRUE(lm);
  EngineOptions o;
  o.draft_model = lm.get();
  ExpectSampledLikePlain(*lm, Spec(3, DraftSource::kModel), o, 5000);
}

// The draft model's greedy continuation of `sequence` (prompt then generated, decoded one
// token at a time from a fresh session), `n` tokens.
std::vector<int32_t> DraftGreedy(const LoadedModel& draft, const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& generated, int n) {
  Session s(draft);
  std::vector<float> logits;
  const PositionIds pos =
      SequentialPositions(draft.config().position_mode, static_cast<int64_t>(prompt.size()));
  EXPECT_TRUE(s.PrefillTokens(prompt, pos, 0, {}, &logits).ok());
  for (int32_t t : generated) EXPECT_TRUE(s.Decode(t, &logits).ok());
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    out.push_back(ArgMax(logits));
    if (static_cast<int>(out.size()) < n) {
      EXPECT_TRUE(s.Decode(out.back(), &logits).ok());
    }
  }
  return out;
}

// The drafter stays in step with the sequence through partial acceptances (the rejected draft
// rows are rewound), full acceptances (the last draft and the bonus token are caught up in one
// run) and a pass without drafts: every draft is the draft model's greedy continuation of the
// true sequence.
TEST(DraftModelTest, DrafterFollowsTheSequenceThroughRejections) {
  auto draft = LoadSpecCheckpoint("drafter_unit", Untied(41, 2), 1, 48);
  ASSERT_TRUE(draft);
  ModelDrafter drafter(*draft, 1);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  const PositionIds pos = SequentialPositions(PositionMode::kMrope, 8);  // converted to 1-D
  PromptView view;
  view.tokens = prompt;
  view.positions = &pos;
  ASSERT_TRUE(drafter.Begin(0, view).ok());
  const auto S = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> generated = {7};  // the target's first token
  auto draft_now = [&](int limit) {
    const ModelDrafter::Job job{0, prompt, generated, limit};
    std::vector<std::vector<int32_t>> d;
    drafter.Draft(std::span<const ModelDrafter::Job>(&job, 1), &d);
    return d.at(0);
  };
  std::vector<int32_t> d = draft_now(4);
  EXPECT_EQ(d, DraftGreedy(*draft, prompt, generated, 4));
  // One draft accepted, then the target chose 77: it keeps the rows of 7 and d[0].
  generated.push_back(d[0]);
  generated.push_back(77);
  drafter.Keep(0, S + 2);
  d = draft_now(3);
  EXPECT_EQ(d, DraftGreedy(*draft, prompt, generated, 3));
  // All three accepted and a bonus token: the target keeps 77 and the three drafts.
  generated.insert(generated.end(), d.begin(), d.end());
  generated.push_back(12);
  drafter.Keep(0, S + 6);
  // A pass without drafts (the engine ran out of room): one more token accepted.
  generated.push_back(30);
  drafter.Keep(0, S + 7);
  d = draft_now(5);
  EXPECT_EQ(d, DraftGreedy(*draft, prompt, generated, 5));
  // Nothing accepted: the target keeps only the fed token, then chose 99.
  generated.push_back(99);
  drafter.Keep(0, S + 8);
  d = draft_now(2);
  EXPECT_EQ(d, DraftGreedy(*draft, prompt, generated, 2));
  // The draft cache is full: no drafts beyond its room.
  EXPECT_EQ(drafter.Room(0, S + 8), 48 - S - 8);
  drafter.Forget(0);
  EXPECT_FALSE(drafter.Active(0));
  EXPECT_TRUE(draft_now(2).empty());
}

TEST(DraftModelTest, WhatDoesNotFitIsRefused) {
  auto lm = LoadModel("draft_refuse", 2, 32);
  ASSERT_TRUE(lm);
  // Drafting from a model without one: at creation (engine default) and at submit (request).
  EngineOptions no_model;
  no_model.speculative = Spec(4, DraftSource::kModel);
  auto e = BatchEngine::Create(*lm, nullptr, no_model);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("needs a draft model"), std::string::npos);
  BatchEngine plain(*lm);
  GenerationRequest r = Text({1, 2, 3}, 0, 4);
  r.speculative = Spec(4, DraftSource::kModel);
  auto id = plain.Submit(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("no draft model"), std::string::npos);
  // A draft with another vocabulary, or loaded for fewer slots.
  TestModelSpec other = Untied(29, 2);
  other.vocab = 256;
  auto small_vocab = LoadSpecCheckpoint("draft_vocab", other, 2, 32);
  auto one_slot = LoadSpecCheckpoint("draft_slots", Untied(31, 2), 1, 32);
  ASSERT_TRUE(small_vocab && one_slot);
  auto v = BatchEngine::Create(*lm, nullptr, DraftOptions(small_vocab.get(), 4));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("vocabulary of 256"), std::string::npos);
  auto s = BatchEngine::Create(*lm, nullptr, DraftOptions(one_slot.get(), 4));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("1 slot(s)"), std::string::npos);
  EXPECT_THROW(BatchEngine(*lm, nullptr, DraftOptions(one_slot.get(), 4)), std::invalid_argument);
}

}  // namespace
}  // namespace vls
