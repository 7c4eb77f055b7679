#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
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

// The candidates and their probabilities by the definition: every token sorted by logit
// (descending, index ascending on ties), softmax at the temperature over the top-k, then the
// top-p and min-p cuts, renormalised. [token] -> probability; tokens outside are never drawn.
std::map<int32_t, double> ReferenceCandidates(const std::vector<float>& l,
                                              const SamplingParams& sp) {
  std::vector<int32_t> order(l.size());
  for (size_t i = 0; i < l.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  size_t n = sp.top_k > 0 ? std::min(order.size(), static_cast<size_t>(sp.top_k)) : order.size();
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += p[i] = std::exp((l[order[i]] - l[order[0]]) / sp.temperature);
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] /= sum;
    acc += p[i];
    if (sp.top_p < 1.0f && acc >= sp.top_p) n = i + 1;
  }
  size_t keep = 1;
  while (sp.min_p > 0.0f && keep < n && p[keep] >= sp.min_p * p[0]) ++keep;
  if (sp.min_p > 0.0f) n = keep;
  std::map<int32_t, double> out;
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += p[i];
  for (size_t i = 0; i < n; ++i) out[order[i]] = p[i] / kept;
  return out;
}

TEST(SamplerTest, TemperatureSamplingDrawsTheDefinedDistribution) {
  // A 2000-token vocabulary with flat logits, so top-p 0.9 needs far more than the sampler's
  // first sorted prefix, and logits on a coarse grid, so cuts fall inside runs of ties. Every
  // draw must be a candidate, and the draws per rank bucket (eight buckets of equal count) must
  // match the candidates' mass within 5 sigma: a cut in the wrong place empties or overfills the
  // last bucket.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.6f);
  std::vector<float> logits(2000);
  for (float& x : logits) x = std::round(normal(rng) * 8.0f) / 8.0f;
  struct Case {
    float temperature, top_p, min_p;
    int top_k;
  };
  for (const Case c :
       {Case{0.8f, 1.0f, 0.0f, 0}, Case{0.8f, 0.9f, 0.0f, 0}, Case{1.2f, 1.0f, 0.3f, 0},
        Case{0.7f, 0.8f, 0.0f, 20}, Case{1.0f, 0.95f, 0.1f, 500}, Case{1.0f, 1.0f, 0.0f, 7}}) {
    SamplingParams sp;
    sp.temperature = c.temperature;
    sp.top_p = c.top_p;
    sp.min_p = c.min_p;
    sp.top_k = c.top_k;
    sp.seed = 5;
    const std::map<int32_t, double> want = ReferenceCandidates(logits, sp);
    // Rank buckets of the candidates, in the reference order.
    std::vector<std::pair<double, int32_t>> ranked;  // (-probability, token): rank order
    for (const auto& [t, pr] : want) ranked.push_back({-pr, t});
    std::sort(ranked.begin(), ranked.end());
    constexpr int kBuckets = 8;
    const size_t per = (ranked.size() + kBuckets - 1) / kBuckets;
    std::map<int32_t, size_t> bucket_of;
    std::vector<double> mass(kBuckets, 0.0);
    for (size_t r = 0; r < ranked.size(); ++r) {
      bucket_of[ranked[r].second] = r / per;
      mass[r / per] += -ranked[r].first;
    }
    Sampler s(sp, 1);
    constexpr int kDraws = 5000;
    std::vector<int> seen(kBuckets, 0);
    for (int i = 0; i < kDraws; ++i) {
      const int32_t t = s.Sample(logits, {}, {});
      ASSERT_TRUE(want.count(t)) << "token " << t << " is not a candidate; top_k " << c.top_k
                                 << " top_p " << c.top_p << " min_p " << c.min_p;
      ++seen[bucket_of[t]];
    }
    for (int b = 0; b < kBuckets; ++b) {
      const double e = kDraws * mass[b], sd = std::sqrt(kDraws * mass[b] * (1 - mass[b]));
      EXPECT_LE(std::abs(seen[b] - e), 5 * sd + 1)
          << "bucket " << b << " of " << want.size() << " candidates; top_k " << c.top_k
          << " top_p " << c.top_p << " min_p " << c.min_p;
    }
  }
}

// A row holding a NaN or an infinity is never sampled from, whatever the parameters (the
// greedy argmax, the penalties' copy, the temperature path) and wherever the value sits (a
// vector lane, the tail): Sample and Verify return kNonFiniteLogits; ArgMax says so too.
TEST(SamplerTest, NonFiniteLogitsAreNeverSampled) {
  std::vector<SamplingParams> params(5);
  params[1].repetition_penalty = 1.3f;
  params[2].logit_bias = {{3, 2.0f}};
  params[3].temperature = 0.7f;
  params[4].temperature = 1.0f;
  params[4].top_p = 0.5f;
  const float bads[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (const size_t n : {5u, 1000u, 5000u}) {
    std::vector<float> row(n);
    for (float& x : row) x = u(rng);
    bool finite = false;
    EXPECT_EQ(ArgMax(row, &finite), ArgMax(row));
    EXPECT_TRUE(finite);
    for (const size_t at : {size_t{0}, n / 2, n - 1}) {
      for (const float bad : bads) {
        std::vector<float> v = row;
        v[at] = bad;
        SCOPED_TRACE("n " + std::to_string(n) + " at " + std::to_string(at) + " value " +
                     std::to_string(bad));
        finite = true;
        EXPECT_EQ(ArgMax(v, &finite), ArgMax(v));
        EXPECT_FALSE(finite);
        for (size_t i = 0; i < params.size(); ++i) {
          Sampler s(params[i], 1);
          EXPECT_EQ(s.Sample(v, std::vector<int32_t>{1, 2}, std::vector<int32_t>{3}),
                    kNonFiniteLogits)
              << "params " << i;
          bool accepted = true;
          EXPECT_EQ(s.Verify(v, {}, {}, 2, &accepted), kNonFiniteLogits) << "params " << i;
          EXPECT_FALSE(accepted);
          EXPECT_NE(s.Sample(row, {}, {}), kNonFiniteLogits) << "params " << i;
        }
      }
    }
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

// Structured output's token mask: only allowed tokens come out, whatever the sampling.
std::vector<uint32_t> MaskOf(size_t V, std::initializer_list<int32_t> allowed) {
  std::vector<uint32_t> m((V + 31) / 32, 0u);
  for (int32_t t : allowed) m[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
  return m;
}

TEST(SamplerTest, MaskRestrictsGreedyAndSampledTokens) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  logits[50] = 9.0f;  // the unmasked argmax
  const std::vector<uint32_t> mask = MaskOf(logits.size(), {3, 40, 77});
  Sampler greedy(SamplingParams{}, 1);
  EXPECT_EQ(greedy.Sample(logits, {}, {}), 50);
  EXPECT_EQ(greedy.Sample(logits, {}, {}, mask), 40);  // 40 % 7 = 5: the largest allowed
  EXPECT_EQ(MaskedArgMax(logits, mask), 40);
  EXPECT_EQ(MaskedArgMax(logits, MaskOf(logits.size(), {})), -1);
  for (int top_k : {0, 2, 50}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = top_k;
    p.top_p = top_k == 50 ? 0.9f : 1.0f;
    Sampler s(p, 7);
    std::set<int32_t> seen;
    for (int i = 0; i < 400; ++i) seen.insert(s.Sample(logits, {}, {}, mask));
    for (int32_t t : seen) EXPECT_TRUE(t == 3 || t == 40 || t == 77) << t << " top_k " << top_k;
    EXPECT_GE(seen.size(), 2u) << top_k;
  }
}

TEST(SamplerTest, MaskComposesWithLogitBiasAndPenalties) {
  std::vector<float> logits(64, 0.0f);
  SamplingParams p;
  p.logit_bias = {{5, 50.0f}, {9, 10.0f}};
  p.repetition_penalty = 1.5f;
  Sampler s(p, 1);
  EXPECT_EQ(s.Sample(logits, {}, {}), 5);
  EXPECT_EQ(s.Sample(logits, {}, {}, MaskOf(64, {9, 12})), 9);  // the bias of an allowed token
  EXPECT_EQ(s.Sample(logits, {}, {}, MaskOf(64, {12, 33})), 12);
  // Verify draws from the masked distribution: an allowed draft with all the mass is accepted.
  bool ok = false;
  EXPECT_EQ(s.Verify(logits, {}, {}, 9, &ok, MaskOf(64, {9, 12})), 9);
  EXPECT_TRUE(ok);
  SamplingParams t;
  t.temperature = 1.0f;
  Sampler v(t, 3);
  for (int i = 0; i < 50; ++i) {
    const int32_t token = v.Verify(logits, {}, {}, 12, &ok, MaskOf(64, {12, 13}));
    EXPECT_TRUE(token == 12 || token == 13) << token;
    EXPECT_EQ(ok, token == 12);
  }
  // Non-finite logits are caught even where the mask hides them.
  logits[40] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(s.Sample(logits, {}, {}, MaskOf(64, {1})), kNonFiniteLogits);
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
