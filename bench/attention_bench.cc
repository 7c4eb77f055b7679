// Google Benchmark microbenchmarks of the attention core (built, never run by the tests).
//
//   build/…/src/model/attention_bench --benchmark_repetitions=5
//
// Qwen3-0.6B shape (16 heads, 8 KV heads, D 128) over all 28 layers per iteration, so the K/V
// stream comes from memory as in a real decode step (28 · 8 · T · 1 KiB). "RowMajor" is the
// previous design for comparison: a [T, nkv, D] cache row per position, one (row, head) pair
// at a time with the variant's Scores/Softmax/WeightedSum.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "model/attention.h"
#include "model/kv_pool.h"

namespace vls {
namespace {

constexpr int kLayers = 28, kHeads = 16, kKvHeads = 8, kD = 128;

struct Setup {
  explicit Setup(int capacity) : cache(kLayers, capacity, kKvHeads, kD) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(kKvHeads * kD)), v(k.size());
    row_major_k.resize(static_cast<size_t>(kLayers) * capacity * kKvHeads * kD);
    row_major_v.resize(row_major_k.size());
    for (int l = 0; l < kLayers; ++l) {
      for (int t = 0; t < capacity; ++t) {
        for (float& x : k) x = d(rng);
        for (float& x : v) x = d(rng);
        cache.WriteRow(l, t, k.data(), v.data());
        const int64_t at = (static_cast<int64_t>(l) * capacity + t) * kKvHeads * kD;
        std::copy(k.begin(), k.end(), row_major_k.begin() + at);
        std::copy(v.begin(), v.end(), row_major_v.begin() + at);
      }
    }
  }
  KvCache cache;
  std::vector<float> row_major_k, row_major_v;  // [L, C, nkv, D]
};

const AttentionShape kShape{kHeads, kKvHeads, kD};

// state: (M rows ending at key T-1, threads, blocked?)
void BM_Attention(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), T = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const bool blocked = state.range(3) != 0;
  Setup s(T);
  std::vector<ForwardRow> rows;
  for (int i = T - M; i < T; ++i) rows.push_back({&s.cache, i, {i, i, i}});
  std::vector<float> q(static_cast<size_t>(M * kHeads * kD), 0.1f), out(q.size());
  const kernels::Context ctx(threads, kernels::Precision::kF32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      if (blocked) {
        Attend(ctx, l, kShape, q.data(), rows, out.data());
        continue;
      }
      const float* k = s.row_major_k.data() + static_cast<int64_t>(l) * T * kKvHeads * kD;
      const float* v = s.row_major_v.data() + static_cast<int64_t>(l) * T * kKvHeads * kD;
      ctx.pool().ParallelFor(M * kHeads, 1, [&](int64_t b, int64_t e) {
        std::vector<float> p(static_cast<size_t>(T));
        for (int64_t mh = b; mh < e; ++mh) {
          const int64_t m = mh / kHeads, h = mh % kHeads, g = h / (kHeads / kKvHeads);
          const int64_t len = T - M + m + 1;
          ctx.Scores(q.data() + mh * kD, k + g * kD, kKvHeads * kD, len, kD, scale, p.data());
          kernels::Softmax(p.data(), len);
          ctx.WeightedSum(p.data(), v + g * kD, kKvHeads * kD, len, kD, out.data() + mh * kD);
        }
      });
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_bytes/s"] = benchmark::Counter(
      2.0 * kLayers * kKvHeads * T * kD * sizeof(float) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int blocked : {0, 1}) {
    for (int threads : {1, 2}) {
      b->Args({1, 32, threads, blocked});
      b->Args({1, 576, threads, blocked});
      b->Args({512, 512, threads, blocked});
    }
  }
  b->ArgNames({"M", "T", "threads", "blocked"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Attention)->Apply(Shapes);

// One batched decode step: one row in each of `slots` caches of T keys, all 28 layers, with f32
// or BF16 caches (the K/V bytes streamed per step halve with BF16).
void BM_DecodeStep(benchmark::State& state) {
  const int slots = static_cast<int>(state.range(0)), T = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const KvDType dt = state.range(3) != 0 ? KvDType::kBf16 : KvDType::kF32;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(kKvHeads * kD)), v(k.size());
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<ForwardRow> rows;
  for (int s = 0; s < slots; ++s) {
    caches.push_back(std::make_unique<KvCache>(kLayers, T, kKvHeads, kD, dt));
    for (int l = 0; l < kLayers; ++l) {
      for (int t = 0; t < T; ++t) {
        for (float& x : k) x = d(rng);
        for (float& x : v) x = d(rng);
        caches.back()->WriteRow(l, t, k.data(), v.data());
      }
    }
    rows.push_back({caches.back().get(), T - 1, {T - 1, T - 1, T - 1}});
  }
  std::vector<float> q(static_cast<size_t>(slots * kHeads * kD), 0.1f), out(q.size());
  const kernels::Context ctx(threads, kernels::Precision::kF32);
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) Attend(ctx, l, kShape, q.data(), rows, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_bytes/s"] = benchmark::Counter(
      static_cast<double>(caches[0]->bytes()) * slots * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{1, 8}, {64, 512}, {2}, {0, 1}})
    ->ArgNames({"slots", "T", "threads", "bf16"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// Long-context decode (ADR 0020): one row at depth 4,096 and 16,384 over a BF16 cache, the
// K/V stream of 448 MiB and 1.75 GiB per step against the memory bandwidth.
BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{1}, {4096, 16384}, {1, 2}, {1}})
    ->ArgNames({"slots", "T", "threads", "bf16"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Paged KV memory (ADR 0029): the same decode step or prompt chunk over BF16 caches with K in key
// tiles (the serving layout on AVX512-BF16), contiguous (block 0: a private cache) or in pool
// blocks of 64, 128 or 256 positions, each cache's blocks scattered through the pool (taken from
// a shuffled free list, interleaved with the other caches').
void BM_Paged(benchmark::State& state) {
  const int block = static_cast<int>(state.range(0)), slots = static_cast<int>(state.range(1));
  const int T = static_cast<int>(state.range(2)), M = static_cast<int>(state.range(3));
  const int threads = static_cast<int>(state.range(4));
  const KvShape shape{kLayers, kKvHeads, kD, KvDType::kBf16, true};
  std::shared_ptr<KvPool> pool;
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int s = 0; s < slots; ++s) {
    if (block == 0) {
      caches.push_back(std::make_unique<KvCache>(kLayers, T, kKvHeads, kD, KvDType::kBf16, true));
    } else {
      if (!pool) {
        pool = KvPool::Create(shape, block, slots * ((T + block - 1) / block)).value();
        std::vector<int32_t> ids;
        (void)pool->Acquire(pool->blocks(), &ids);
        std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
        pool->Release(ids);
      }
      caches.push_back(std::make_unique<KvCache>(pool, T));
    }
  }
  for (int upto = 1; upto <= T; upto = std::min(T, upto + 64)) {  // interleaved reservations
    for (auto& c : caches) (void)c->Reserve(upto);
    if (upto == T) break;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(kKvHeads * kD)), v(k.size());
  std::vector<ForwardRow> rows;
  for (auto& c : caches) {
    for (int l = 0; l < kLayers; ++l) {
      for (int t = 0; t < T; ++t) {
        for (float& x : k) x = d(rng);
        for (float& x : v) x = d(rng);
        c->WriteRow(l, t, k.data(), v.data());
      }
    }
    for (int i = T - M; i < T; ++i) rows.push_back({c.get(), i, {i, i, i}});
  }
  std::vector<float> q(rows.size() * kHeads * kD, 0.1f), out(q.size());
  const kernels::Context ctx(threads, kernels::Precision::kBF16);
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) Attend(ctx, l, kShape, q.data(), rows, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_bytes/s"] =
      benchmark::Counter(2.0 * 2 * kLayers * kKvHeads * kD * static_cast<double>(T) * slots *
                             static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Paged)
    ->ArgsProduct({{0, 64, 128, 256}, {8}, {2048}, {1}, {2}})
    ->ArgsProduct({{0, 64, 128, 256}, {1}, {16384}, {1}, {2}})
    ->ArgsProduct({{0, 64, 128, 256}, {1}, {2048}, {512}, {2}})
    ->ArgNames({"block", "slots", "T", "M", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vls

BENCHMARK_MAIN();
