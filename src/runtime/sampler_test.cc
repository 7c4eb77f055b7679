#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

namespace vls {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f};

TEST(SamplerTest, GreedyIsArgMaxWithLowestIndexOnTies) {
  Sampler s({}, 1);
  EXPECT_EQ(s.Sample(kLogits, {}, {}), 1);
  const std::vector<float> tie = {3, 5, 5};
  EXPECT_EQ(ArgMax(tie), 1);
}

TEST(SamplerTest, ArgMaxMatchesALinearScanAcrossLanesTailsTiesAndNaN) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (const size_t n : {1u, 15u, 16u, 17u, 100u, 151936u}) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    // A tie for the maximum: the later copy sits in another lane, or in the tail.
    const size_t a = n / 3, b = n - 1;
    v[a] = v[b] = 9.0f;
    if (n > 2) v[0] = std::numeric_limits<float>::quiet_NaN();
    size_t want = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(v[want]) || v[i] > v[want]) want = i;
    }
    EXPECT_EQ(ArgMax(v), static_cast<int32_t>(want)) << "n=" << n;
    EXPECT_EQ(static_cast<size_t>(ArgMax(v)), n > 2 ? a : 0u) << "n=" << n;
  }
  const std::vector<float> all_nan(20, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(ArgMax(all_nan), 0);
  const std::vector<float> low = {-std::numeric_limits<float>::infinity(), -1e30f};
  EXPECT_EQ(ArgMax(low), 1);
}

TEST(SamplerTest, SeededSamplingIsReproducibleAndTopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p, 1), b(p, 999);  // same seed, different request ids
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.Sample(kLogits, {}, {}), b.Sample(kLogits, {}, {}));
  p.top_k = 1;
  Sampler k1(p, 3);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(k1.Sample(kLogits, {}, {}), 1);
}

TEST(SamplerTest, TopPAndMinPTrimTheTail) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;  // token 1 alone holds < 0.5, tokens {1,2} hold more
  p.seed = 7;
  Sampler s(p, 1);
  std::map<int, int> seen;
  for (int i = 0; i < 200; ++i) ++seen[s.Sample(kLogits, {}, {})];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(1) && seen.count(2));
  SamplingParams m;
  m.temperature = 1.0f;
  m.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p(top): 1 and 2
  m.seed = 8;
  Sampler ms(m, 1);
  for (int i = 0; i < 100; ++i) {
    const int t = ms.Sample(kLogits, {}, {});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(SamplerTest, PenaltiesChangeTheGreedyChoice) {
  SamplingParams rep;
  rep.repetition_penalty = 2.0f;  // 2.0 -> 1.0 for token 1, so token 2 (1.9) wins
  Sampler r(rep, 1);
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(r.Sample(kLogits, history, {}), 2);
  SamplingParams pres;
  pres.presence_penalty = 0.5f;
  Sampler pr(pres, 1);
  EXPECT_EQ(pr.Sample(kLogits, {}, history), 2);
  EXPECT_EQ(pr.Sample(kLogits, history, {}), 1);  // presence counts generated tokens only
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  Status s = ValidateSamplingParams(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sampling.top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
}

}  // namespace
}  // namespace vls
