// Per-request token sampling: penalties, then greedy or temperature → top-k → top-p → min-p,
// with a seeded splitmix64 RNG owned by the request (reproducible whatever the batch holds).
#ifndef VLSTACK_RUNTIME_SAMPLER_H_
#define VLSTACK_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"

namespace vls {

struct SamplingParams {
  float temperature = 0.0f;         // <= 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // HF style, over prompt and generated tokens
  float presence_penalty = 0.0f;    // OpenAI style, over generated tokens
  float frequency_penalty = 0.0f;   // OpenAI style, over generated tokens
  std::optional<uint64_t> seed;     // default: derived from the request id
  // Added to the logits of these token ids before anything else (OpenAI logit_bias; a bias of
  // -100 or less bans the token).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Names the first out-of-range field.
Status ValidateSamplingParams(const SamplingParams& p);

class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t request_id);

  // logits: [V]. prompt/generated: the request's history for the penalties.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> generated);

 private:
  double NextUniform();         // [0, 1)
  int32_t SampleTemperature();  // over scratch_ (the penalised logits), temperature > 0
  // The index i where a uniform draw over [0, total) falls among weights w, or w.size().
  size_t Draw(std::span<const double> w, double total);

  SamplingParams params_;
  uint64_t state_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;    // the sorted prefix's probabilities
  std::vector<double> weights_;  // [V] exp((logit - max) / temperature) without top-k
};

// Log-probabilities under softmax(logits): of `token`, and the `n` most likely tokens (logit
// descending, index ascending on ties) into `top` (may be null when n == 0).
double LogProb(std::span<const float> logits, int32_t token, int n,
               std::vector<std::pair<int32_t, float>>* top);

// Index of the largest value; the lowest index wins ties.
int32_t ArgMax(std::span<const float> logits);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_SAMPLER_H_
