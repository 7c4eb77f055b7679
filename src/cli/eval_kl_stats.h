// The statistics of `vlstack eval-kl`: how far a test model's next-token distribution lies from
// a reference's, position by position, at several softmax temperatures (llama-perplexity
// --kl-divergence's KL, "same top p" and RMS Δp).
#ifndef VLSTACK_CLI_EVAL_KL_STATS_H_
#define VLSTACK_CLI_EVAL_KL_STATS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace vls::cli {

// out[v] = log softmax(logits / temperature)[v], computed in double. out is resized to V.
// REQUIRES: temperature > 0, logits non-empty.
void LogSoftmax(std::span<const float> logits, double temperature, std::vector<double>* out);

// KL(P || Q) = sum_v P[v] (log P[v] - log Q[v]) from the log-probabilities of P and Q (same
// size). A sum that rounding leaves below zero is returned as 0 (KL is never negative);
// identical inputs give exactly 0.
double KlDivergence(std::span<const double> log_p, std::span<const double> log_q);

// The index of the largest logit (the first one on a tie).
int64_t ArgMax(std::span<const float> logits);

// One temperature's summary over every compared position.
struct KlSummary {
  double temperature = 1;
  int64_t positions = 0;
  double kl_mean = 0, kl_median = 0, kl_p99 = 0, kl_max = 0;  // quantiles: linear interpolation
  double top1_agreement = 0;  // fraction of positions whose argmax is the same in both models
  // sqrt(mean((Q[next] - P[next])^2)): the probability the test model moves from the reference
  // on the token that actually comes next (llama.cpp's "RMS Δp").
  double rms_delta_p = 0;
};

// Collects per-position comparisons at a fixed list of temperatures.
class KlAccumulator {
 public:
  explicit KlAccumulator(std::vector<double> temperatures);

  // Compares one position: ref and test are the two models' logits [V] for it, `next` the
  // token that follows it in the stream (in [0, V)).
  void Add(std::span<const float> ref, std::span<const float> test, int32_t next);

  int64_t positions() const { return positions_; }
  // The mean KL so far at temperature index t (for progress lines).
  double MeanKl(size_t t) const;
  // One summary per temperature, in the order given.
  std::vector<KlSummary> Summarise() const;

 private:
  std::vector<double> temperatures_;
  std::vector<std::vector<double>> kl_;  // [T][positions]
  std::vector<double> delta_p_sq_;       // [T]: sum of squared Δp
  int64_t positions_ = 0, top1_same_ = 0;
  std::vector<double> log_ref_, log_test_;  // [V] scratch
};

}  // namespace vls::cli

#endif  // VLSTACK_CLI_EVAL_KL_STATS_H_
