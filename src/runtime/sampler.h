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

// What Sample and Verify return for a logits row holding a NaN or an infinity: nothing is
// sampled (the request should end with an error; the model or its weights are broken). The
// check shares the pass that already reads the row (the argmax, or the copy the penalties and
// the temperature work on).
inline constexpr int32_t kNonFiniteLogits = -1;

class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t request_id);

  // logits: [V]. prompt/generated: the request's history for the penalties. A token id, or
  // kNonFiniteLogits.
  //
  // mask (structured output): empty, or [ceil(V / 32)] words, bit (t % 32) of word t / 32 set
  // where token t is allowed (grammar::MaskWords). Applied first, with the logit bias (a
  // disallowed token's logit becomes -inf), so the penalties, temperature, top-k, top-p and
  // min-p see only allowed tokens and greedy takes the masked argmax. REQUIRES: the mask allows
  // at least one token (the finiteness check still covers the whole raw row).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> generated, std::span<const uint32_t> mask = {});

  // Speculative verification of a drafted token (docs/speculative.md): returns the token to
  // emit and whether it is `draft` accepted. Greedy: the token Sample returns (accepted when it
  // equals the draft). Sampled, with p the distribution Sample draws from (penalties,
  // temperature, top-k, top-p, min-p): accept with probability p(draft), else draw from p with
  // the draft removed and renormalised, so the emitted token is distributed as p exactly.
  // kNonFiniteLogits (not accepted) for a non-finite row.
  // With a mask, p is the masked distribution (REQUIRES: the draft is allowed).
  int32_t Verify(std::span<const float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> generated, int32_t draft, bool* accepted,
                 std::span<const uint32_t> mask = {});

 private:
  // The distribution a temperature sample draws from: token tokens[i] (token i when `tokens`
  // is empty) with weight weights[i], normalised by `total`; `fallback` when a draw falls past
  // the end by rounding.
  struct Candidates {
    std::span<const int32_t> tokens;
    std::span<double> weights;  // scratch: Verify zeroes the rejected draft's
    double total = 0;
    int32_t fallback = 0;
  };
  // Applies the logit bias and the penalties to scratch_; false when the request is greedy
  // without either (the raw logits are then the argmax's input, and *finite is not set).
  // Otherwise *finite tells whether every logit is finite (when not, scratch_ is a plain copy).
  // When a copy is made, a non-empty mask first sets the disallowed tokens to -inf (plain greedy
  // makes none: Sample takes the masked argmax of the raw row).
  bool Prepare(std::span<const float> logits, std::span<const int32_t> prompt,
               std::span<const int32_t> generated, std::span<const uint32_t> mask, bool* finite);
  double NextUniform();  // [0, 1)
  // Over scratch_ (the penalised logits), temperature > 0. A degenerate distribution (all -inf
  // or an infinite logit) gives an empty candidate list with `fallback` its argmax.
  Candidates TemperatureCandidates();
  int32_t SampleTemperature();
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
// The same among the tokens `mask` allows (Sampler::Sample's mask), NaN never chosen; -1 when
// the mask allows none.
int32_t MaskedArgMax(std::span<const float> logits, std::span<const uint32_t> mask);
// The same, and whether every value is finite (no NaN, no infinity), in the same pass.
int32_t ArgMax(std::span<const float> logits, bool* finite);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_SAMPLER_H_
