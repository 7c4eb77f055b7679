// Google Benchmark microbenchmarks of the grouped expert products of a sparse layer
// (Context::MatMulGrouped, ADR 0027) at the Qwen3-30B-A3B / Qwen3-VL-30B-A3B expert shapes
// (built when Google Benchmark is found, never run by the tests):
//
//   build/…/src/kernels/moe_bench [--benchmark_filter=Experts/q4]
//
// Experts/<format>/<projection>/<mode>: P experts of M rows each, gate_up [1536, 2048] (two
// experts' 768-row gate and up stacked) or down [2048, 768], stored as Q4 (--precision int4),
// Q8 (int8) or BF16 blocked (bf16); mode "grouped" is one MatMulGrouped call, "loop" one MatMul
// per expert (what the model did before). Decode reads each chosen expert's weights once, so a
// step is bound by memory: the experts are copies of one prepared expert filling a pool of
// VLS_MOE_BENCH_POOL_MIB (default 1024) MiB, far above the last-level cache, and each iteration
// takes the next P of them, so every weight byte comes from DRAM as in a real model's layers.
// Counters: wbytes/s (expert weight bytes read per second) and of_read_bw (that over the read
// bandwidth the Memory/read benchmark measures on the same threads: 1.0 is the memory roof).
// ExpertsCached/<format>/<projection>/grouped: the same products over two experts taken in turn,
// whose weights stay in the last-level cache (the kernels' own speed, ADR 0027).
// Memory/read sums a 1 GiB buffer over the pool (kernels/read_bandwidth.h); Memory/read_jumps
// sums it on one thread in shuffled chunks (the cost of starting a stream); Memory/memcpy copies
// 512 MiB (bytes/s counts the bytes read and written).
//
// Measured 2026-12-04, 2 threads, medians of 3 runs, on a quiet 16-core 2.1 GHz AVX-512 VM (read
// roof 27.3 GB/s; memcpy 26.7 GB/s read+written): grouped vs loop within ±5% (run-to-run noise
// ±10%) except Q4 down (+7% at 8 experts, +17% at 32×2 rows); of the read roof, Q8 reads at
// 0.83-0.93, Q4 at 0.68-0.81, BF16 blocked at 0.55-0.67 (the kernels, not the grouping, set
// these: grouped and loop read alike). On the shared 2-core development machine (load 8) every
// figure moved ±20% between runs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/memory.h"
#include "base/thread_pool.h"
#include "kernels/bf16_blocked.h"
#include "kernels/dispatch.h"
#include "kernels/q4.h"
#include "kernels/quant.h"
#include "kernels/read_bandwidth.h"

namespace vls::kernels {
namespace {

enum class Format { kQ4, kQ8, kBf16Blocked };

const char* FormatName(Format f) {
  switch (f) {
    case Format::kQ4: return "q4";
    case Format::kQ8: return "q8";
    case Format::kBf16Blocked: return "bf16blocked";
  }
  return "?";
}

Precision PrecisionFor(Format f) {
  switch (f) {
    case Format::kQ4: return Precision::kInt4;
    case Format::kQ8: return Precision::kInt8;
    case Format::kBf16Blocked: return Precision::kBF16;
  }
  return Precision::kF32;
}

int64_t BytesOf(Format f, int64_t N, int64_t K) {
  switch (f) {
    case Format::kQ4: return Q4Bytes(N, K);
    case Format::kQ8: return Q8LayoutFor(N, K).bytes;
    case Format::kBf16Blocked: return Bf16BlockedBytes(N, K);
  }
  return 0;
}

// A buffer on huge pages, as the engine's prepared weights are (base/memory.h, ADR 0036), faulted
// in before any timed loop. VLS_MOE_BENCH_4K=1 takes 4 KiB pages instead, for comparison: what
// this benchmark measured until 2026-12-07 (aligned_alloc, which transparent huge pages in
// "madvise" mode leave at 4 KiB). The Experts benchmarks report the share of their pool that
// huge pages back (the `huge` counter).
class Buffer {
 public:
  explicit Buffer(size_t bytes) {
    bytes = (bytes + 4095) / 4096 * 4096;
    if (const char* env = std::getenv("VLS_MOE_BENCH_4K"); env != nullptr && env[0] == '1') {
      plain_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
      if (plain_ == nullptr) std::abort();
      data_ = plain_.get();
    } else {
      StatusOr<std::unique_ptr<HugeRegion>> r = HugeRegion::Allocate(bytes);
      if (!r.ok()) std::abort();
      region_ = std::move(*r);
      data_ = reinterpret_cast<uint8_t*>(region_->data());
    }
    std::memset(data_, 0, bytes);  // faulted in now, not in the timed loop
  }
  uint8_t* get() const { return data_; }
  // The fraction of the buffer on huge pages (0 for the 4 KiB one).
  double HugeShare() const {
    return region_ == nullptr ? 0.0
                              : static_cast<double>(region_->HugePageBytes()) /
                                    static_cast<double>(region_->size());
  }

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<HugeRegion> region_;
  std::unique_ptr<uint8_t, FreeDeleter> plain_;
  uint8_t* data_ = nullptr;
};

size_t PoolBytes() {
  const char* env = std::getenv("VLS_MOE_BENCH_POOL_MIB");
  const long mib = env != nullptr ? std::atol(env) : 1024;
  return static_cast<size_t>(std::max(64L, mib)) << 20;
}

// Experts of one format and shape: one prepared from random weights, copied to fill the pool.
// One pool lives at a time (the benchmarks are registered pool by pool).
struct ExpertPool {
  Format format;
  int64_t N, K, bytes;
  std::unique_ptr<Buffer> data;
  std::vector<Matrix> experts;

  ExpertPool(Format f, int64_t n, int64_t k) : format(f), N(n), K(k), bytes(BytesOf(f, n, k)) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<float> w(static_cast<size_t>(N * K));
    for (float& v : w) v = d(rng);
    const Matrix src{DType::kF32, w.data(), N, K};
    const size_t stride = static_cast<size_t>(bytes + 4095) / 4096 * 4096;
    const size_t count = std::max<size_t>(64, PoolBytes() / stride);
    data = std::make_unique<Buffer>(stride * count);
    uint8_t* first = data->get();
    switch (f) {
      case Format::kQ4: QuantizeQ4(src, 0, N, first, N, 0); break;
      case Format::kQ8: QuantizeQ8(src, 0, N, first); break;
      case Format::kBf16Blocked: PackBf16Blocked(src, 0, N, first, N, 0); break;
    }
    for (size_t e = 0; e < count; ++e) {
      uint8_t* base = first + e * stride;
      if (e > 0) std::memcpy(base, first, static_cast<size_t>(bytes));
      switch (f) {
        case Format::kQ4: experts.push_back(Q4MatrixAt(base, N, K)); break;
        case Format::kQ8: experts.push_back(Q8MatrixAt(base, N, K)); break;
        case Format::kBf16Blocked: experts.push_back(Bf16BlockedMatrixAt(base, N, K)); break;
      }
    }
  }
};

const ExpertPool& Pool(Format f, int64_t N, int64_t K) {
  static std::unique_ptr<ExpertPool> current;
  if (current == nullptr || current->format != f || current->N != N || current->K != K) {
    current.reset();
    current = std::make_unique<ExpertPool>(f, N, K);
  }
  return *current;
}

constexpr size_t kReadBytes = size_t{1} << 30;

// The read bandwidth of `threads` threads, bytes/s: the best of 5 passes over 1 GiB.
double MeasuredReadBandwidth(int threads) {
  static std::vector<double> measured(64, 0.0);
  double& bw = measured[static_cast<size_t>(threads)];
  if (bw > 0) return bw;
  ThreadPool pool(threads);
  const Buffer buf(kReadBytes);
  bw = ReadBandwidth(pool, buf.get(), kReadBytes, 5);
  return bw;
}

void BM_Read(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  const Buffer buf(kReadBytes);
  for (auto _ : state) benchmark::DoNotOptimize(SumLines(pool, buf.get(), kReadBytes / 64));
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(kReadBytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// One thread summing the 1 GiB buffer in chunks of `KiB` visited in a shuffled order: every
// chunk starts a new stream, so against whole-buffer reads (KiB:1048576) it shows what a jump
// costs (ADR 0035: about 1 µs on the Zen 5 host at 16-256 KiB).
void BM_ReadJumps(benchmark::State& state) {
  const auto chunk = static_cast<size_t>(state.range(0)) << 10;
  ThreadPool pool(1);
  const Buffer buf(kReadBytes);
  std::vector<size_t> order(kReadBytes / chunk);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t c : order)
      sum += SumLines(pool, buf.get() + c * chunk, static_cast<int64_t>(chunk / 64));
    benchmark::DoNotOptimize(sum);
  }
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(kReadBytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["s_per_chunk"] = benchmark::Counter(
      static_cast<double>(order.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_Memcpy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr size_t kBytes = size_t{512} << 20;
  ThreadPool pool(threads);
  const Buffer src(kBytes), dst(kBytes);
  constexpr int64_t kChunk = 1 << 20;
  for (auto _ : state) {
    pool.ParallelFor(kBytes / kChunk, 1, [&](int64_t b, int64_t e) {
      std::memcpy(dst.get() + b * kChunk, src.get() + b * kChunk,
                  static_cast<size_t>((e - b) * kChunk));
    });
    benchmark::DoNotOptimize(dst.get());
  }
  state.counters["bytes/s"] = benchmark::Counter(
      2.0 * kBytes * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Args: P experts, M rows each, threads. `cycled`: the products take the first `cycled` experts
// of the pool in turn (0: all of them, so the weights come from memory).
void BM_Experts(benchmark::State& state, Format f, int64_t N, int64_t K, bool grouped,
                size_t cycled) {
  const int64_t P = state.range(0), M = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const double read_bw = MeasuredReadBandwidth(threads);
  const ExpertPool& pool = Pool(f, N, K);
  Context ctx(threads, PrecisionFor(f), nullptr);
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::vector<float>> x(static_cast<size_t>(P)), y(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) {
    x[size_t(p)].resize(static_cast<size_t>(M * K));
    for (float& v : x[size_t(p)]) v = d(rng);
    y[size_t(p)].resize(static_cast<size_t>(M * N));
  }
  std::vector<GroupedProduct> products(static_cast<size_t>(P));
  const size_t E = cycled > 0 ? std::min(cycled, pool.experts.size()) : pool.experts.size();
  size_t next = 0;
  for (auto _ : state) {
    for (int64_t p = 0; p < P; ++p) {
      products[size_t(p)] = {x[size_t(p)].data(), M, &pool.experts[next], y[size_t(p)].data()};
      next = (next + 1) % E;
    }
    if (grouped) {
      ctx.MatMulGrouped(products, K);
    } else {
      for (const GroupedProduct& g : products) ctx.MatMul(g.x, g.M, K, *g.w, g.y);
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes =
      static_cast<double>(P * pool.bytes) * static_cast<double>(state.iterations());
  state.counters["wbytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["of_read_bw"] = benchmark::Counter(bytes / read_bw, benchmark::Counter::kIsRate);
  state.counters["experts"] = static_cast<double>(E);
  state.counters["huge"] = pool.data->HugeShare();
  // Multiply-adds per second: at prefill's ~32 rows per expert the products are bound by them.
  state.counters["macs/s"] = benchmark::Counter(
      static_cast<double>(P * M * N * K) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

int Register() {
  benchmark::RegisterBenchmark("Memory/read", BM_Read)
      ->Arg(1)
      ->Arg(2)
      ->ArgName("threads")
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Memory/read_jumps", BM_ReadJumps)
      ->Arg(16)
      ->Arg(64)
      ->Arg(256)
      ->Arg(2048)
      ->Arg(1 << 20)
      ->ArgName("KiB")
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Memory/memcpy", BM_Memcpy)
      ->Arg(1)
      ->Arg(2)
      ->ArgName("threads")
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  struct Projection {
    const char* name;
    int64_t N, K;
  };
  // Qwen3-30B-A3B: hidden 2048, moe_intermediate_size 768.
  constexpr Projection kProjections[] = {{"gate_up", 1536, 2048}, {"down", 2048, 768}};
  for (Format f : {Format::kQ4, Format::kQ8, Format::kBf16Blocked}) {
    for (const Projection& pr : kProjections) {
      for (bool grouped : {true, false}) {
        const std::string name = std::string("Experts/") + FormatName(f) + "/" + pr.name + "/" +
                                 (grouped ? "grouped" : "loop");
        benchmark::RegisterBenchmark(name.c_str(), BM_Experts, f, pr.N, pr.K, grouped, 0)
            ->Args({8, 1, 2})     // one decode row: its top-8
            ->Args({32, 2, 2})    // a few slots or speculative rows sharing experts
            ->Args({64, 1, 2})    // 8 slots of top-8 over 128 experts (~52 distinct)
            ->Args({128, 8, 2})   // a 128-token prompt: ~8 rows per expert
            ->Args({128, 16, 2})  // a prompt's less chosen experts: 3 row tiles of Q8
            ->Args({128, 32, 2})  // a 512-token prompt in one pass: ~32 rows per expert
            ->ArgNames({"P", "M", "threads"})
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      // The same grouped products over two experts taken in turn (a few MB, in the last-level
      // cache): what the kernels do when memory is not in the way. Against the rows above in
      // one process it shows what the memory costs a product.
      const std::string cached =
          std::string("ExpertsCached/") + FormatName(f) + "/" + pr.name + "/grouped";
      benchmark::RegisterBenchmark(cached.c_str(), BM_Experts, f, pr.N, pr.K, true, 2)
          ->Args({64, 1, 2})
          ->Args({128, 8, 2})
          ->Args({128, 16, 2})
          ->Args({128, 32, 2})
          ->ArgNames({"P", "M", "threads"})
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace vls::kernels

BENCHMARK_MAIN();
