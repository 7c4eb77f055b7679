// eval-kl's statistics against values worked out by hand.
#include "cli/eval_kl_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cli/quantile.h"

namespace vls::cli {
namespace {

TEST(EvalKlStats, LogSoftmaxNormalisesAndScalesByTemperature) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // softmax: 1/4, 3/4
  std::vector<double> lp;
  LogSoftmax(logits, 1.0, &lp);
  ASSERT_EQ(lp.size(), 2u);
  EXPECT_NEAR(std::exp(lp[0]), 0.25, 1e-7);
  EXPECT_NEAR(std::exp(lp[1]), 0.75, 1e-7);
  LogSoftmax(logits, 2.0, &lp);  // logits / 2: 1 : sqrt(3)
  EXPECT_NEAR(std::exp(lp[0]), 1.0 / (1.0 + std::sqrt(3.0)), 1e-7);
  // Large logits do not overflow.
  LogSoftmax(std::vector<float>{1e30f, 0.0f}, 1.0, &lp);
  EXPECT_EQ(lp[0], 0.0);
  EXPECT_TRUE(std::isinf(lp[1]) || lp[1] < -1e29);
}

TEST(EvalKlStats, KlOfTwoKnownDistributions) {
  // P = (1/2, 1/2), Q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const std::vector<double> p = {std::log(0.5), std::log(0.5)};
  const std::vector<double> q = {std::log(0.25), std::log(0.75)};
  EXPECT_NEAR(KlDivergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-15);
  EXPECT_GT(KlDivergence(q, p), 0.0);
  EXPECT_EQ(KlDivergence(p, p), 0.0);
}

TEST(EvalKlStats, QuantileMatchesNumPy) {
  // numpy.percentile([4, 1, 3, 2], [0, 50, 99, 100]) = 1, 2.5, 3.97, 4.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.5), 2.5);
  EXPECT_NEAR(Quantile(v, 0.99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Quantile(v, 1.0), 4.0);
  EXPECT_EQ(Quantile({}, 0.5), 0.0);
}

TEST(EvalKlStats, AccumulatorSummarises) {
  KlAccumulator acc({1.0, 4.0});
  const std::vector<float> ref = {0.0f, std::log(3.0f)};  // 1/4, 3/4 at T=1
  const std::vector<float> same = ref;
  const std::vector<float> flipped = {std::log(3.0f), 0.0f};  // 3/4, 1/4: argmax differs
  acc.Add(ref, same, 1);
  acc.Add(ref, flipped, 1);
  EXPECT_EQ(acc.positions(), 2);
  const std::vector<KlSummary> s = acc.Summarise();
  ASSERT_EQ(s.size(), 2u);
  const double kl = 0.25 * std::log(0.25 / 0.75) + 0.75 * std::log(0.75 / 0.25);  // = ln(3) / 2
  EXPECT_EQ(s[0].temperature, 1.0);
  EXPECT_NEAR(s[0].kl_mean, kl / 2, 1e-7);
  EXPECT_NEAR(s[0].kl_median, kl / 2, 1e-7);
  EXPECT_NEAR(s[0].kl_max, kl, 1e-7);
  EXPECT_NEAR(s[0].kl_p99, 0.99 * kl, 1e-7);
  EXPECT_DOUBLE_EQ(s[0].top1_agreement, 0.5);
  // Δp on token 1: 0 and 1/4 - 3/4 = -1/2: RMS = sqrt(1/8).
  EXPECT_NEAR(s[0].rms_delta_p, std::sqrt(0.125), 1e-7);
  // A higher temperature flattens both: a smaller KL, the same top-1.
  EXPECT_LT(s[1].kl_mean, s[0].kl_mean);
  EXPECT_GT(s[1].kl_mean, 0.0);
  EXPECT_DOUBLE_EQ(s[1].top1_agreement, 0.5);
}

}  // namespace
}  // namespace vls::cli
