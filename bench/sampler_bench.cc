// Token sampling over a 151936-token vocabulary (the Qwen3 vocabulary): greedy, plain
// temperature, and the usual cuts. Logits are drawn from N(0, 3²), about the spread of a real
// model's logits, with a fixed seed.
//
//   build/src/runtime/sampler_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "runtime/sampler.h"

namespace vls {
namespace {

constexpr int kVocab = 151936;

std::vector<float> Logits() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> l(kVocab);
  for (float& x : l) x = normal(rng);
  return l;
}

// args: temperature ×100, top_k, top_p ×100, min_p ×100.
void BM_Sample(benchmark::State& state) {
  const std::vector<float> logits = Logits();
  SamplingParams p;
  p.temperature = static_cast<float>(state.range(0)) / 100.0f;
  p.top_k = static_cast<int>(state.range(1));
  p.top_p = static_cast<float>(state.range(2)) / 100.0f;
  p.min_p = static_cast<float>(state.range(3)) / 100.0f;
  p.seed = 7;
  Sampler s(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(s.Sample(logits, {}, {}));
}
BENCHMARK(BM_Sample)
    ->ArgNames({"temp", "top_k", "top_p", "min_p"})
    ->Args({0, 0, 100, 0})    // greedy
    ->Args({100, 0, 100, 0})  // temperature only
    ->Args({70, 0, 90, 0})    // top-p
    ->Args({70, 20, 80, 0})   // Qwen3-VL's recommended top-k 20, top-p 0.8
    ->Args({100, 0, 100, 5})  // min-p
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vls

BENCHMARK_MAIN();
