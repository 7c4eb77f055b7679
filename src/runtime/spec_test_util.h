// Shared by the speculative-decoding engine tests (prompt lookup and draft model): running
// requests to completion with per-request outcomes and counters, and a chi-square comparison of
// two samples.
#ifndef VLSTACK_RUNTIME_SPEC_TEST_UTIL_H_
#define VLSTACK_RUNTIME_SPEC_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"

namespace vls {

inline SpeculativeParams Spec(int k, DraftSource source = DraftSource::kNgram) {
  SpeculativeParams p;
  p.draft_tokens = k;
  p.source = source;
  return p;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::vector<int32_t> generated_counts;  // TokenEvent::generated_tokens of each token event
  int finish_events = 0;
  bool after_finish = false;  // an event arrived after the finish event
};

struct Result {
  std::map<uint64_t, Outcome> by_id;
  EngineCounters counters;
  std::vector<uint64_t> ids;
};

// Runs `reqs` to completion on one engine; `stop_after[i]` > 0 makes the callback refuse the
// i-th request's stop_after-th token (a stop string, as TextStream reports one).
inline Result RunAll(const LoadedModel& lm, std::vector<GenerationRequest> reqs,
                     EngineOptions opts = {}, std::vector<int> stop_after = {}) {
  Result run;
  std::map<uint64_t, int> limit;
  BatchEngine e(
      lm,
      [&](const TokenEvent& ev) {
        Outcome& o = run.by_id[ev.request_id];
        if (o.finish_events > 0) o.after_finish = true;
        if (ev.token >= 0) {
          o.tokens.push_back(ev.token);
          o.generated_counts.push_back(ev.generated_tokens);
        }
        if (ev.finish != FinishReason::kNone) {
          o.finish = ev.finish;
          ++o.finish_events;
        }
        const auto it = limit.find(ev.request_id);
        return it == limit.end() || static_cast<int>(o.tokens.size()) < it->second;
      },
      std::move(opts));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const uint64_t id = e.Submit(reqs[i]).value();
    run.ids.push_back(id);
    if (i < stop_after.size() && stop_after[i] > 0) limit[id] = stop_after[i];
  }
  e.RunUntilIdle();
  run.counters = e.counters();
  return run;
}

// Two samples of equal size from the same distribution: the chi-square statistic of their
// counts stays under its 1e-4 upper quantile (cells with fewer than 10 draws pooled).
inline void ExpectSameDistribution(const std::map<int32_t, int>& a,
                                   const std::map<int32_t, int>& b) {
  std::set<int32_t> keys;
  for (const auto& [t, n] : a) keys.insert(t);
  for (const auto& [t, n] : b) keys.insert(t);
  // Equal sample sizes: chi = sum (a - b)^2 / (a + b) over cells, df = cells - 1.
  double chi = 0;
  int cells = 0, small_a = 0, small_b = 0;
  for (int32_t t : keys) {
    const int x = a.count(t) ? a.at(t) : 0, y = b.count(t) ? b.at(t) : 0;
    if (x + y < 10) {
      small_a += x;
      small_b += y;
      continue;
    }
    chi += static_cast<double>((x - y) * (x - y)) / (x + y);
    ++cells;
  }
  if (small_a + small_b > 0) {
    chi += static_cast<double>((small_a - small_b) * (small_a - small_b)) / (small_a + small_b);
    ++cells;
  }
  ASSERT_GE(cells, 3) << "the distribution should be spread over several tokens";
  // The 1e-4 upper quantile of chi-square with df degrees of freedom (Wilson-Hilferty, within
  // 2% of the exact value from df 2 on; z = 3.719 is the normal's 1e-4 quantile).
  const double df = cells - 1, z = 3.719;
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi, crit) << cells << " cells";
}

// Sampled requests with and without speculation give the same distribution of their second and
// third tokens: `requests` copies of a short prompt at temperature 20 (the tied model's logits
// are far apart) and top-k 6, each with its own seed from `seed`, run plainly and with
// `speculative` on an engine with `options`; the speculating run must accept some drafts and
// reject others.
inline void ExpectSampledLikePlain(const LoadedModel& lm, const SpeculativeParams& speculative,
                                   const EngineOptions& options, uint64_t seed,
                                   int requests = 1200) {
  auto histogram = [&](bool speculate) {
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < requests; ++i) {
      GenerationRequest r = Text({4, 5, 4, 5, 4}, 0, 4);
      r.sampling.temperature = 20.0f;
      r.sampling.top_k = 6;
      r.sampling.seed = seed + static_cast<uint64_t>(i);
      if (speculate) r.speculative = speculative;
      reqs.push_back(r);
    }
    const Result run = RunAll(lm, reqs, options);
    std::vector<std::map<int32_t, int>> h(2);
    for (uint64_t id : run.ids) {
      const auto& t = run.by_id.at(id).tokens;
      EXPECT_EQ(t.size(), 4u);
      if (t.size() != 4) continue;
      ++h[0][t[1]];
      ++h[1][t[2]];
    }
    if (speculate) {
      EXPECT_GT(run.counters.accepted_draft_tokens, 0u);
      EXPECT_LT(run.counters.accepted_draft_tokens, run.counters.draft_tokens);
    }
    return h;
  };
  const std::vector<std::map<int32_t, int>> plain = histogram(false), spec = histogram(true);
  for (size_t position = 0; position < 2; ++position) {
    SCOPED_TRACE("token " + std::to_string(position + 1));
    ExpectSameDistribution(plain[position], spec[position]);
  }
}

}  // namespace vls

#endif  // VLSTACK_RUNTIME_SPEC_TEST_UTIL_H_
