// Sampler::Verify, the rejection-sampling step of speculative decoding: the token it emits is
// distributed exactly as Sample's, whatever the draft.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/sampler.h"

namespace vls {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f, 1.2f};

// softmax(logits / T) restricted to the top k (k = 0: all), renormalised.
std::vector<double> Expected(float temperature, int top_k) {
  std::vector<double> p(kLogits.size(), 0.0);
  double z = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) {
    int rank = 0;
    for (const float x : kLogits) rank += x > kLogits[i] ? 1 : 0;
    if (top_k > 0 && rank >= top_k) continue;
    z += p[i] = std::exp(kLogits[i] / temperature);
  }
  for (double& x : p) x /= z;
  return p;
}

// Pearson's statistic of `counts` against `p` over the cells with p > 0; a count in a cell with
// p == 0 makes it infinite.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] != 0) return INFINITY;
      continue;
    }
    const double e = p[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

// For each draft (the most likely token, an unlikely one, one the top-k cut removes) the
// emitted tokens' frequencies match p: with 5 degrees of freedom the chi-square statistic
// exceeds 25.7 with probability 1e-4 (3 degrees of freedom with top-k 4: 21.1). The seed is
// fixed, so the outcome is deterministic; a Verify that emitted the draft whenever p(draft) > 0
// (or never redrew without it) fails by hundreds.
TEST(SamplerVerifyTest, EmittedTokensFollowTheSamplingDistribution) {
  constexpr int kTrials = 40000;
  for (const int top_k : {0, 4}) {
    const std::vector<double> p = Expected(0.8f, top_k);
    for (const int32_t draft : {1, 3, 0}) {
      SCOPED_TRACE("top_k " + std::to_string(top_k) + " draft " + std::to_string(draft));
      SamplingParams sp;
      sp.temperature = 0.8f;
      sp.top_k = top_k;
      sp.seed = 1234 + static_cast<uint64_t>(draft);
      Sampler s(sp, 0);
      std::vector<int> counts(kLogits.size(), 0);
      int accepted = 0;
      for (int t = 0; t < kTrials; ++t) {
        bool ok = false;
        const int32_t token = s.Verify(kLogits, {}, {}, draft, &ok);
        ASSERT_GE(token, 0);
        ASSERT_LT(token, static_cast<int32_t>(kLogits.size()));
        EXPECT_EQ(ok, token == draft);
        ++counts[static_cast<size_t>(token)];
        accepted += ok ? 1 : 0;
      }
      EXPECT_LT(ChiSquare(counts, p, kTrials), top_k == 0 ? 25.7 : 21.1);
      // Acceptance is p(draft): within 5 standard deviations.
      const double pd = p[static_cast<size_t>(draft)];
      EXPECT_NEAR(accepted, pd * kTrials, 5 * std::sqrt(kTrials * pd * (1 - pd)) + 1);
    }
  }
}

TEST(SamplerVerifyTest, GreedyAcceptsExactlyTheArgMax) {
  Sampler s({}, 1);
  bool ok = false;
  EXPECT_EQ(s.Verify(kLogits, {}, {}, 1, &ok), 1);
  EXPECT_TRUE(ok);
  EXPECT_EQ(s.Verify(kLogits, {}, {}, 2, &ok), 1);
  EXPECT_FALSE(ok);
  // Penalties apply as in Sample: a repetition penalty on token 1 makes 2 the greedy choice.
  SamplingParams sp;
  sp.repetition_penalty = 2.0f;
  Sampler pen(sp, 1);
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(pen.Verify(kLogits, {}, history, 2, &ok), 2);
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace vls
