// Speculative decoding in the batch engine (prompt lookup, docs/speculative.md): greedy tokens
// equal plain decoding bit for bit, and every per-token promise (limits, stops, cancellation,
// capacity, events in order, other slots) holds when several tokens come out of one pass.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"
#include "runtime/spec_test_util.h"

namespace vls {
namespace {

// A tied tiny model predicts (mostly) its input token, so its greedy chains repeat and drafts
// are accepted; an untied one varies, and drafts are mostly rejected.
std::unique_ptr<LoadedModel> LoadSpecModel(
    const std::string& name, bool tied, int slots, int capacity = 64,
    kernels::Precision precision = kernels::Precision::kF32) {
  return LoadModel("spec_" + name, slots, capacity, precision, tied);
}

std::vector<GenerationRequest> Prompts(int max_new) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(Text({1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, 0, max_new));  // continuation repeats
  reqs.push_back(Text({9, 8, 7}, -2, max_new));
  reqs.push_back(Text({5, 6, 7, 8, 9, 10, 11}, 3, max_new));
  reqs.push_back(Text({42, 42, 42, 42}, 0, max_new));
  return reqs;
}

void ExpectGreedyParity(const LoadedModel& lm, int k, double min_acceptance) {
  const std::vector<GenerationRequest> reqs = Prompts(24);
  EngineOptions opts;
  opts.speculative = Spec(k);
  for (size_t i = 0; i < reqs.size(); ++i) {
    // One request alone (single stream), then all of them together.
    const Result one = RunAll(lm, {reqs[i]}, opts);
    const Outcome& o = one.by_id.at(one.ids[0]);
    EXPECT_EQ(o.tokens, GreedyAlone(lm, reqs[i])) << "request " << i;
    EXPECT_EQ(o.finish, FinishReason::kLength);
    for (size_t t = 0; t < o.generated_counts.size(); ++t) {
      EXPECT_EQ(o.generated_counts[t], static_cast<int32_t>(t + 1));  // in order, one each
    }
  }
  const Result all = RunAll(lm, reqs, opts);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(all.by_id.at(all.ids[i]).tokens, GreedyAlone(lm, reqs[i])) << "batched " << i;
  }
  const EngineCounters& c = all.counters;
  EXPECT_GT(c.verify_passes, 0u);
  EXPECT_LE(c.accepted_draft_tokens, c.draft_tokens);
  const double acceptance =
      static_cast<double>(c.accepted_draft_tokens) / static_cast<double>(c.draft_tokens);
  EXPECT_GE(acceptance, min_acceptance);
  // Every accepted draft is a token that took no pass of its own.
  EXPECT_EQ(c.generated_tokens, 4u * 24u);
}

TEST(SpeculativeTest, GreedyTokensEqualPlainDecodingWithHighAcceptance) {
  auto lm = LoadSpecModel("tied_parity", true, 4);
  ASSERT_TRUE(lm);
  // The tied model repeats: most drafts are accepted, and the steps fall well below one per
  // token.
  ExpectGreedyParity(*lm, 8, 0.5);
  const Result r = RunAll(*lm, {Prompts(24)[3]}, [] {
    EngineOptions o;
    o.speculative = Spec(8);
    return o;
  }());
  EXPECT_LT(r.counters.steps, 12u);
}

TEST(SpeculativeTest, GreedyTokensEqualPlainDecodingWithLowAcceptance) {
  auto lm = LoadSpecModel("untied_parity", false, 4);
  ASSERT_TRUE(lm);
  std::set<int32_t> distinct;
  for (const auto& r : Prompts(24)) {
    for (int32_t t : GreedyAlone(*lm, r)) distinct.insert(t);
  }
  EXPECT_GT(distinct.size(), 8u) << "the untied model should vary";
  ExpectGreedyParity(*lm, 4, 0.0);
}

TEST(SpeculativeTest, GreedyTokensEqualPlainDecodingAtBf16AndInt8) {
  for (const auto precision : {kernels::Precision::kBF16, kernels::Precision::kInt8}) {
    SCOPED_TRACE(kernels::PrecisionName(precision));
    for (const bool tied : {true, false}) {
      auto lm = LoadSpecModel(
          std::string("p_") + kernels::PrecisionName(precision) + (tied ? "_tied" : "_untied"),
          tied, 4, 64, precision);
      ASSERT_TRUE(lm);
      const std::vector<GenerationRequest> reqs = Prompts(20);
      EngineOptions opts;
      opts.speculative = Spec(6);
      const Result all = RunAll(*lm, reqs, opts);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(all.by_id.at(all.ids[i]).tokens, GreedyAlone(*lm, reqs[i])) << "request " << i;
      }
    }
  }
}

// The first position at which the greedy stream holds a token it did not hold before.
size_t FirstNewToken(const std::vector<int32_t>& s, size_t from) {
  for (size_t i = from; i < s.size(); ++i) {
    if (std::find(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(i), s[i]) ==
        s.begin() + static_cast<std::ptrdiff_t>(i)) {
      return i;
    }
  }
  return s.size();
}

TEST(SpeculativeTest, LimitsAndStopsCutAnAcceptedRun) {
  auto lm = LoadSpecModel("tied_limits", true, 2);
  ASSERT_TRUE(lm);
  EngineOptions opts;
  opts.speculative = Spec(8);
  const GenerationRequest base = Prompts(24)[0];
  const std::vector<int32_t> ref = GreedyAlone(*lm, base);
  // max_new_tokens inside what one pass could accept: exactly that many tokens.
  for (const int max_new : {1, 2, 3, 5, 11}) {
    GenerationRequest r = base;
    r.max_new_tokens = max_new;
    const Result run = RunAll(*lm, {r}, opts);
    const Outcome& o = run.by_id.at(run.ids[0]);
    EXPECT_EQ(o.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + max_new)) << max_new;
    EXPECT_EQ(o.finish, FinishReason::kLength);
    EXPECT_EQ(o.finish_events, 1);
    EXPECT_FALSE(o.after_finish);
  }
  // A stop token id first produced at position j > 2 (the untied model: the tied one repeats
  // one token): the stream ends there with "stop".
  auto untied = LoadSpecModel("untied_limits", false, 1);
  ASSERT_TRUE(untied);
  const GenerationRequest varied = Prompts(24)[2];
  const std::vector<int32_t> vref = GreedyAlone(*untied, varied);
  const size_t j = FirstNewToken(vref, 3);
  ASSERT_LT(j, vref.size()) << "the reference should produce a new token after position 3";
  GenerationRequest stop = varied;
  stop.stop_token_ids = {vref[j]};
  Result run = RunAll(*untied, {stop}, opts);
  EXPECT_EQ(run.by_id.at(run.ids[0]).tokens,
            std::vector<int32_t>(vref.begin(), vref.begin() + static_cast<std::ptrdiff_t>(j) + 1));
  EXPECT_EQ(run.by_id.at(run.ids[0]).finish, FinishReason::kStop);
  EXPECT_EQ(run.by_id.at(run.ids[0]).finish_events, 1);
  // A stop string (the callback refuses the 4th token, as TextStream asks): nothing after it
  // but the cancelled event, although the pass produced more.
  run = RunAll(*lm, {base}, opts, {4});
  const Outcome& o = run.by_id.at(run.ids[0]);
  EXPECT_EQ(o.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + 4));
  EXPECT_EQ(o.finish, FinishReason::kCancelled);
  EXPECT_EQ(o.finish_events, 1);
  EXPECT_FALSE(o.after_finish);
}

TEST(SpeculativeTest, CancelBetweenStepsAndCapacityEdge) {
  auto lm = LoadSpecModel("tied_small", true, 1, 32);
  ASSERT_TRUE(lm);
  EngineOptions opts;
  opts.speculative = Spec(8);
  // The prompt and max_new_tokens fill the capacity exactly: drafts never pass it.
  GenerationRequest full = Text({3, 4, 3, 4, 3, 4}, 0, 26);
  const std::vector<int32_t> ref = GreedyAlone(*lm, full);
  Result run = RunAll(*lm, {full}, opts);
  EXPECT_EQ(run.by_id.at(run.ids[0]).tokens, ref);
  EXPECT_EQ(run.by_id.at(run.ids[0]).finish, FinishReason::kLength);
  // Cancel after the second step: what came out is a prefix of the reference, then nothing.
  std::vector<TokenEvent> events;
  BatchEngine e(*lm, nullptr, opts);
  const uint64_t id = e.Submit(full).value();
  for (int i = 0; i < 2; ++i) {
    for (auto& ev : e.Step()) events.push_back(ev);
  }
  ASSERT_TRUE(e.Cancel(id).ok());
  EXPECT_TRUE(e.Step().empty());
  std::vector<int32_t> got;
  for (const auto& ev : events) {
    if (ev.token >= 0) got.push_back(ev.token);
  }
  ASSERT_GT(got.size(), 2u);  // the second step accepted drafts
  EXPECT_EQ(got, std::vector<int32_t>(ref.begin(),
                                      ref.begin() + static_cast<std::ptrdiff_t>(got.size())));
  // The slot is reused afterwards (its kept rows are consistent): same tokens again.
  run = RunAll(*lm, {full}, opts);
  EXPECT_EQ(run.by_id.at(run.ids[0]).tokens, ref);
  EXPECT_TRUE(e.Idle());
  const uint64_t again = e.Submit(full).value();
  std::vector<int32_t> reused;
  while (!e.Idle()) {
    for (const auto& ev : e.Step()) {
      if (ev.request_id == again && ev.token >= 0) reused.push_back(ev.token);
    }
  }
  EXPECT_EQ(reused, ref);
  EXPECT_GT(e.counters().cached_tokens, 0u);
}

TEST(SpeculativeTest, MixedSlotsEqualSoloRuns) {
  auto lm = LoadSpecModel("tied_mixed", true, 3);
  ASSERT_TRUE(lm);
  std::vector<GenerationRequest> reqs = Prompts(16);
  reqs.resize(3);
  reqs[0].speculative = Spec(8);  // per request, over the engine default (off)
  reqs[2].speculative = Spec(3);
  reqs.push_back(Image(*lm, 1, true, 12));  // DeepStack prompt, default: no speculation
  const Result run = RunAll(*lm, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(run.by_id.at(run.ids[i]).tokens, GreedyAlone(*lm, reqs[i])) << "request " << i;
  }
  EXPECT_GT(run.counters.accepted_draft_tokens, 0u);
  // A request may turn speculation off under an engine default.
  EngineOptions opts;
  opts.speculative = Spec(8);
  GenerationRequest off = reqs[0];
  off.speculative = Spec(0);
  const Result plain = RunAll(*lm, {off}, opts);
  EXPECT_EQ(plain.counters.draft_tokens, 0u);
  EXPECT_EQ(plain.by_id.at(plain.ids[0]).tokens, GreedyAlone(*lm, off));
}

TEST(SpeculativeTest, BadSpeculativeParamsAreRefusedAtSubmit) {
  auto lm = LoadSpecModel("tied_refuse", true, 1, 32);
  ASSERT_TRUE(lm);
  BatchEngine e(*lm);
  GenerationRequest r = Text({1, 2}, 0, 4);
  r.speculative = Spec(-1);
  EXPECT_FALSE(e.Submit(r).ok());
  r.speculative = Spec(4);
  r.speculative->min_ngram = 0;
  EXPECT_FALSE(e.Submit(r).ok());
  EXPECT_EQ(e.pending_count(), 0u);
}

// Sampled requests: the second and third tokens (the first ones a verify pass can produce: the
// second verifies a draft, the third verifies one or is the bonus) have the same distributions
// with and without speculation. The tied model at temperature 20 accepts about a quarter of the
// drafts, so both the acceptance and the redraw paths contribute. Two-sample chi-square over the
// tokens seen, with the cells of fewer than 5 expected merged; 1e-4 critical values. Seeds are
// fixed, so the outcome is deterministic.
TEST(SpeculativeTest, SampledSecondTokenDistributionMatchesPlainSampling) {
  auto lm = LoadSpecModel("tied_sampled", true, 8, 32);
  ASSERT_TRUE(lm);
  ExpectSampledLikePlain(*lm, Spec(4), {}, 1000);
}

// Session::DecodeRuns: a run of tokens in one pass gives the logits of feeding them one at a
// time. Each row goes through the same per-row operations (matmul rows and attention queries
// are independent), so the results agree to float rounding of identical operations: exactly.
TEST(SpeculativeTest, DecodeRunsEqualsOneTokenAtATime) {
  auto lm = LoadSpecModel("untied_runs", false, 2);
  ASSERT_TRUE(lm);
  const GenerationRequest r = Text({1, 2, 3, 4, 5}, 2, 8);
  Session a(*lm), b(*lm);
  std::vector<float> la, lb;
  ASSERT_TRUE(a.PrefillTokens(r.tokens, r.positions, r.rope_delta, {}, &la).ok());
  ASSERT_TRUE(b.PrefillTokens(r.tokens, r.positions, r.rope_delta, {}, &lb).ok());
  const std::vector<int32_t> run = {7, 9, 11, 13};
  std::vector<float> one;
  std::vector<float> seq;
  for (int32_t t : run) {
    ASSERT_TRUE(a.Decode(t, &one).ok());
    seq.insert(seq.end(), one.begin(), one.end());
  }
  Session* sb = &b;
  const int32_t n = 4;
  std::vector<float> together;
  ASSERT_TRUE(Session::DecodeRuns(std::span<Session* const>(&sb, 1), run,
                                  std::span<const int32_t>(&n, 1), &together)
                  .ok());
  EXPECT_EQ(together, seq);
  EXPECT_EQ(a.length(), b.length());
  // Rewind drops the last two rows; decoding them again gives the same logits.
  b.Rewind(b.length() - 2);
  ASSERT_TRUE(b.Decode(11, &one).ok());
  const size_t V = static_cast<size_t>(lm->config().vocab);
  EXPECT_EQ(one, std::vector<float>(seq.begin() + 2 * V, seq.begin() + 3 * V));
  // A run that does not fit the capacity is refused and changes nothing.
  const int32_t too_many = lm->bounds().capacity;
  std::vector<int32_t> big(static_cast<size_t>(too_many), 1);
  EXPECT_FALSE(Session::DecodeRuns(std::span<Session* const>(&sb, 1), big,
                                   std::span<const int32_t>(&too_many, 1), &together)
                   .ok());
  EXPECT_EQ(b.length(), a.length() - 1);
}

}  // namespace
}  // namespace vls
