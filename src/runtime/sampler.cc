#include "runtime/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

namespace vls {

Status ValidateSamplingParams(const SamplingParams& p) {
  auto bad = [](const char* field, const std::string& why) {
    return InvalidArgument(std::string("sampling.") + field + ": " + why);
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0) return bad("temperature", "must be >= 0");
  if (p.top_k < 0) return bad("top_k", "must be >= 0");
  if (!(p.top_p > 0 && p.top_p <= 1)) return bad("top_p", "must be in (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return bad("min_p", "must be in [0, 1]");
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) {
    return bad("repetition_penalty", "must be > 0");
  }
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", "must be finite");
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", "must be finite");
  return Status::Ok();
}

namespace {

// Whether a float is NaN or infinite, as a flag in bit 31 (all exponent bits set carry into it),
// so a row's flags OR together in the same vector pass as the maximum.
inline uint32_t NonFiniteBit(float x) {
  return (std::bit_cast<uint32_t>(x) & 0x7F800000u) + 0x00800000u;
}

// ArgMax, and with kCheck whether every value is finite, in one pass.
template <bool kCheck>
int32_t ArgMaxImpl(std::span<const float> logits, bool* finite) {
  // The maximum of each chunk over kLanes independent running maxima (one compare-and-select
  // chain would serialise on its latency), then the first index holding the overall maximum
  // within the first chunk that reached it. NaN never compares greater, so it is never the
  // maximum.
  constexpr size_t kLanes = 16, kChunk = 1024;
  constexpr float kLow = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  float best = kLow;
  size_t best_chunk = n;  // none yet
  uint32_t bad = 0;       // NonFiniteBit of every value, ORed
  for (size_t c0 = 0; c0 < n; c0 += kChunk) {
    const size_t c1 = std::min(n, c0 + kChunk);
    std::array<float, kLanes> lane;
    lane.fill(kLow);
    std::array<uint32_t, kLanes> flags{};
    size_t i = c0;
    for (; i + kLanes <= c1; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) {
        const float x = logits[i + j];
        lane[j] = x > lane[j] ? x : lane[j];
        if constexpr (kCheck) flags[j] |= NonFiniteBit(x);
      }
    }
    float mx = kLow;
    for (; i < c1; ++i) {
      mx = logits[i] > mx ? logits[i] : mx;
      if constexpr (kCheck) bad |= NonFiniteBit(logits[i]);
    }
    for (const float x : lane) mx = x > mx ? x : mx;
    if constexpr (kCheck) {
      for (const uint32_t f : flags) bad |= f;
    }
    if (mx > best || (best_chunk == n && mx == best)) {
      best = mx;
      best_chunk = c0;
    }
  }
  if constexpr (kCheck) *finite = (bad & 0x80000000u) == 0;
  for (size_t t = best_chunk; t < std::min(n, best_chunk + kChunk); ++t) {
    if (logits[t] == best) return static_cast<int32_t>(t);
  }
  return 0;  // empty, or nothing but NaN
}

// Copies `in` to `out` and returns whether every value is finite, in one pass.
bool CopyFinite(std::span<const float> in, std::vector<float>* out) {
  out->resize(in.size());
  float* __restrict o = out->data();
  const float* __restrict x = in.data();
  const size_t n = in.size();
  constexpr size_t kLanes = 16;  // independent flags, which -O2 vectorises as ArgMax's lanes
  std::array<uint32_t, kLanes> flags{};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      o[i + j] = x[i + j];
      flags[j] |= NonFiniteBit(x[i + j]);
    }
  }
  uint32_t bad = 0;
  for (const uint32_t f : flags) bad |= f;
  for (; i < n; ++i) {
    o[i] = x[i];
    bad |= NonFiniteBit(x[i]);
  }
  return (bad & 0x80000000u) == 0;
}

}  // namespace

int32_t ArgMax(std::span<const float> logits) { return ArgMaxImpl<false>(logits, nullptr); }

int32_t ArgMax(std::span<const float> logits, bool* finite) {
  return ArgMaxImpl<true>(logits, finite);
}

int32_t MaskedArgMax(std::span<const float> logits, std::span<const uint32_t> mask) {
  const size_t V = logits.size();
  int32_t best = -1;
  float best_value = 0;
  for (size_t w = 0; w < mask.size() && w * 32 < V; ++w) {
    for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
      const size_t t = w * 32 + static_cast<size_t>(std::countr_zero(bits));
      if (t >= V) break;
      const float x = logits[t];
      if (std::isnan(x)) continue;
      if (best < 0 || x > best_value) {
        best = static_cast<int32_t>(t);
        best_value = x;
      }
    }
  }
  return best;
}

namespace {

// Sets the logits of the tokens `mask` does not allow to -inf.
void ApplyMask(std::span<const uint32_t> mask, std::span<float> l) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const size_t V = l.size();
  for (size_t w = 0; w * 32 < V; ++w) {
    const uint32_t bits = w < mask.size() ? mask[w] : 0u;
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(V, w * 32 + 32);
    if (bits == 0) {
      std::fill(l.begin() + static_cast<std::ptrdiff_t>(w * 32),
                l.begin() + static_cast<std::ptrdiff_t>(end), kOff);
      continue;
    }
    for (size_t t = w * 32; t < end; ++t) {
      if (((bits >> (t & 31)) & 1u) == 0) l[t] = kOff;
    }
  }
}

bool Allowed(std::span<const uint32_t> mask, int32_t t) {
  return mask.empty() || (t >= 0 && static_cast<size_t>(t >> 5) < mask.size() &&
                          ((mask[static_cast<size_t>(t >> 5)] >> (t & 31)) & 1u) != 0);
}

}  // namespace

double LogProb(std::span<const float> logits, int32_t token, int n,
               std::vector<std::pair<int32_t, float>>* top) {
  const size_t V = logits.size();
  const int32_t best = ArgMax(logits);
  const double mx = V == 0 ? 0.0 : logits[static_cast<size_t>(best)];
  double sum = 0.0;
  for (const float x : logits) {
    if (!std::isnan(x)) sum += std::exp(static_cast<double>(x) - mx);
  }
  const double log_z = mx + std::log(sum);
  auto lp = [&](int32_t t) {
    const float x = logits[static_cast<size_t>(t)];
    return std::isnan(x) ? -std::numeric_limits<double>::infinity() : x - log_z;
  };
  if (top != nullptr) {
    top->clear();
    const size_t k = std::min(V, static_cast<size_t>(std::max(n, 0)));
    if (k > 0) {
      std::vector<int32_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      auto greater = [&](int32_t a, int32_t b) {
        const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
        const bool xn = std::isnan(x), yn = std::isnan(y);
        if (xn != yn) return yn;  // NaN last
        if (!xn && x != y) return x > y;
        return a < b;
      };
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        greater);
      for (size_t i = 0; i < k; ++i) {
        top->emplace_back(order[i], static_cast<float>(lp(order[i])));
      }
    }
  }
  if (token < 0 || static_cast<size_t>(token) >= V) return -std::numeric_limits<double>::infinity();
  return lp(token);
}

Sampler::Sampler(const SamplingParams& params, uint64_t request_id)
    : params_(params), state_(params.seed.value_or(0x9E3779B97F4A7C15ull ^ request_id)) {}

double Sampler::NextUniform() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

bool Sampler::Prepare(std::span<const float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> generated, std::span<const uint32_t> mask,
                      bool* finite) {
  const auto V = static_cast<int32_t>(logits.size());
  const bool penalties = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                         params_.frequency_penalty != 0.0f;
  const bool bias = !params_.logit_bias.empty();
  if (params_.temperature <= 0.0f && !penalties && !bias) return false;  // no copy needed
  *finite = CopyFinite(logits, &scratch_);
  if (!*finite) return true;  // nothing is sampled
  if (!mask.empty()) ApplyMask(mask, scratch_);
  float* l = scratch_.data();
  for (const auto& [t, b] : params_.logit_bias) {
    if (t >= 0 && t < V) l[t] += b;  // OpenAI: added to the logits before sampling
  }
  if (params_.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      if (t < 0 || t >= V) return;
      float& x = l[t];
      x = x > 0 ? x / params_.repetition_penalty : x * params_.repetition_penalty;
    };
    std::vector<bool> seen(static_cast<size_t>(V), false);
    for (auto list : {prompt, generated}) {
      for (int32_t t : list) {
        if (t >= 0 && t < V && !seen[static_cast<size_t>(t)]) {
          seen[static_cast<size_t>(t)] = true;
          penalise(t);
        }
      }
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : generated) ++counts[t];
    for (const auto& [t, n] : counts) {
      if (t < 0 || t >= V) continue;
      l[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
    }
  }
  return true;
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> generated, std::span<const uint32_t> mask) {
  bool finite = true;
  if (!Prepare(logits, prompt, generated, mask, &finite)) {
    // Greedy on the raw logits: the argmax when the mask allows it (it is then the masked
    // argmax too, ties included), else the masked argmax, without copying the row.
    const int32_t token = ArgMax(logits, &finite);
    if (!finite) return kNonFiniteLogits;
    return Allowed(mask, token) ? token : MaskedArgMax(logits, mask);
  }
  if (!finite) return kNonFiniteLogits;
  int32_t token = params_.temperature <= 0.0f ? ArgMax(scratch_) : SampleTemperature();
  // A draw that rounding pushed onto a disallowed (zero-weight) candidate: the masked argmax.
  if (!Allowed(mask, token)) token = MaskedArgMax(scratch_, mask);
  return token;
}

int32_t Sampler::Verify(std::span<const float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> generated, int32_t draft, bool* accepted,
                        std::span<const uint32_t> mask) {
  if (params_.temperature <= 0.0f) {
    const int32_t token = Sample(logits, prompt, generated, mask);
    *accepted = token == draft;
    return token;
  }
  bool finite = true;
  Prepare(logits, prompt, generated, mask, &finite);  // true: the temperature needs the copy
  *accepted = false;
  if (!finite) return kNonFiniteLogits;
  const Candidates c = TemperatureCandidates();
  if (c.weights.empty()) {  // a degenerate distribution: one token has all the mass
    *accepted = c.fallback == draft;
    return c.fallback;
  }
  auto token_at = [&c](size_t i) {
    return c.tokens.empty() ? static_cast<int32_t>(i) : c.tokens[i];
  };
  // p(draft): its weight among the candidates (0 when the cuts removed it).
  size_t at = c.weights.size();
  if (c.tokens.empty()) {
    if (draft >= 0 && static_cast<size_t>(draft) < c.weights.size())
      at = static_cast<size_t>(draft);
  } else {
    at = static_cast<size_t>(std::find(c.tokens.begin(), c.tokens.end(), draft) - c.tokens.begin());
  }
  const double w = at < c.weights.size() ? c.weights[at] : 0.0;
  if (w > 0 && NextUniform() * c.total < w) {
    *accepted = true;
    return draft;
  }
  // Rejected: draw from p with the draft removed, renormalised. Its weight is zeroed in place
  // (the candidates are scratch, rebuilt by the next call).
  if (at < c.weights.size()) c.weights[at] = 0.0;
  const double rest = c.total - w;
  if (!(rest > 0)) {  // rounding: the draft held all the mass after all
    *accepted = true;
    return draft;
  }
  const size_t i = Draw(c.weights, rest);
  const int32_t token = i < c.weights.size() ? token_at(i) : c.fallback;
  return Allowed(mask, token) ? token : MaskedArgMax(scratch_, mask);
}

size_t Sampler::Draw(std::span<const double> w, double total) {
  double u = NextUniform() * total;
  for (size_t i = 0; i < w.size(); ++i) {
    u -= w[i];
    if (u < 0) return i;
  }
  return w.size();  // rounding left u at or above 0: the caller's fallback
}

Sampler::Candidates Sampler::TemperatureCandidates() {
  // Candidates in logit order (descending, index ascending on ties); top-k keeps the first
  // top_k, and top-p and min-p trim the tail of what is left. Only the prefix of the order that
  // the cuts need is sorted: a prefix of kFirstPrefix, grown kPrefixGrowth-fold until the cuts
  // fall inside it. A full stable_sort of a 151936-token vocabulary cost more than a whole 0.6B
  // decode step.
  constexpr size_t kFirstPrefix = 256, kPrefixGrowth = 8;
  float* l = scratch_.data();
  const size_t V = scratch_.size();
  for (size_t i = 0; i < V; ++i) {
    if (std::isnan(l[i])) l[i] = -std::numeric_limits<float>::infinity();  // never chosen
  }
  const int32_t best = ArgMax(scratch_);
  const double mx = l[best];
  Candidates c;
  c.fallback = best;
  if (!std::isfinite(mx)) return c;  // nothing but -inf (or an infinite logit): greedy
  const double temp = params_.temperature;
  auto weight = [&](int32_t t) { return std::exp((l[t] - mx) / temp); };
  const size_t m = params_.top_k > 0 ? std::min(V, static_cast<size_t>(params_.top_k)) : V;
  const bool cuts = params_.top_p < 1.0f || params_.min_p > 0.0f;
  // The normaliser of the candidates' probabilities: over the top-k in order (below), or over
  // the whole vocabulary in index order, each token's weight computed once into weights_.
  double z = 0;
  if (m == V) {
    weights_.resize(V);
    for (size_t i = 0; i < V; ++i) z += weights_[i] = weight(static_cast<int32_t>(i));
    if (!cuts) {  // every token is a candidate: draw in index order, no sorting needed
      c.weights = weights_;
      c.total = z;
      return c;
    }
  }
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  const auto before = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  std::vector<double>& p = probs_;
  // With top-k the first prefix is the top k (its normaliser needs all of them).
  for (size_t k = m < V ? m : std::min(m, kFirstPrefix);; k = std::min(m, k * kPrefixGrowth)) {
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(),
                      before);
    p.resize(k);
    for (size_t i = 0; i < k; ++i)
      p[i] = m < V ? weight(order_[i]) : weights_[static_cast<size_t>(order_[i])];
    if (m < V) z = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& x : p) x /= z;
    // top-p: the shortest prefix holding top_p; found = the cut lies inside this prefix.
    size_t n = k;
    bool found = k == m;
    if (params_.top_p < 1.0f) {
      double acc = 0;
      for (size_t i = 0; i < k; ++i) {
        acc += p[i];
        if (acc >= params_.top_p) {
          n = i + 1;
          found = true;
          break;
        }
      }
    }
    if (params_.min_p > 0.0f) {
      const double floor = params_.min_p * p[0];
      size_t keep = 1;
      while (keep < n && p[keep] >= floor) ++keep;
      if (keep < n) found = true;  // the min-p cut lies inside the prefix
      n = keep;
    }
    if (!found) continue;
    c.tokens = std::span<const int32_t>(order_.data(), n);
    c.weights = std::span<double>(p.data(), n);
    c.total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
    c.fallback = order_[n - 1];
    return c;
  }
}

int32_t Sampler::SampleTemperature() {
  const Candidates c = TemperatureCandidates();
  if (c.weights.empty()) return c.fallback;
  const size_t i = Draw(c.weights, c.total);
  if (i >= c.weights.size()) return c.fallback;
  return c.tokens.empty() ? static_cast<int32_t>(i) : c.tokens[i];
}

}  // namespace vls
