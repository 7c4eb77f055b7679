#include "cli/eval_kl_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "cli/quantile.h"

namespace vls::cli {

void LogSoftmax(std::span<const float> logits, double temperature, std::vector<double>* out) {
  const double inv_t = 1.0 / temperature;
  out->resize(logits.size());
  double max = -INFINITY;
  for (size_t v = 0; v < logits.size(); ++v) {
    (*out)[v] = static_cast<double>(logits[v]) * inv_t;
    max = std::max(max, (*out)[v]);
  }
  double sum = 0;
  for (double x : *out) sum += std::exp(x - max);
  const double log_z = max + std::log(sum);
  for (double& x : *out) x -= log_z;
}

double KlDivergence(std::span<const double> log_p, std::span<const double> log_q) {
  double kl = 0;
  for (size_t v = 0; v < log_p.size(); ++v) {
    kl += std::exp(log_p[v]) * (log_p[v] - log_q[v]);
  }
  return std::max(kl, 0.0);
}

int64_t ArgMax(std::span<const float> logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

KlAccumulator::KlAccumulator(std::vector<double> temperatures)
    : temperatures_(std::move(temperatures)),
      kl_(temperatures_.size()),
      delta_p_sq_(temperatures_.size(), 0.0) {}

void KlAccumulator::Add(std::span<const float> ref, std::span<const float> test, int32_t next) {
  for (size_t t = 0; t < temperatures_.size(); ++t) {
    LogSoftmax(ref, temperatures_[t], &log_ref_);
    LogSoftmax(test, temperatures_[t], &log_test_);
    kl_[t].push_back(KlDivergence(log_ref_, log_test_));
    const auto n = static_cast<size_t>(next);
    const double dp = std::exp(log_test_[n]) - std::exp(log_ref_[n]);
    delta_p_sq_[t] += dp * dp;
  }
  if (ArgMax(ref) == ArgMax(test)) ++top1_same_;
  ++positions_;
}

double KlAccumulator::MeanKl(size_t t) const {
  const std::vector<double>& kl = kl_[t];
  return kl.empty() ? 0
                    : std::accumulate(kl.begin(), kl.end(), 0.0) / static_cast<double>(kl.size());
}

std::vector<KlSummary> KlAccumulator::Summarise() const {
  std::vector<KlSummary> out;
  for (size_t t = 0; t < temperatures_.size(); ++t) {
    const std::vector<double>& kl = kl_[t];
    KlSummary s;
    s.temperature = temperatures_[t];
    s.positions = positions_;
    if (positions_ > 0) {
      const auto n = static_cast<double>(positions_);
      s.kl_mean = MeanKl(t);
      s.kl_median = Quantile(kl, 0.5);
      s.kl_p99 = Quantile(kl, 0.99);
      s.kl_max = *std::max_element(kl.begin(), kl.end());
      s.top1_agreement = static_cast<double>(top1_same_) / n;
      s.rms_delta_p = std::sqrt(delta_p_sq_[t] / n);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace vls::cli
