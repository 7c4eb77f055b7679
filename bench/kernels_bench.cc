// Google Benchmark microbenchmarks of the matmul kernels (built, never run by the tests).
//
//   build/…/src/kernels/kernels_bench --benchmark_filter=MatMul
//
// Shapes are the Qwen3-VL-2B text decoder's gate/up projection (K 2048 → N 6144) at decode
// (M 1), batched decode (M 8) and prefill (M 512), and its down projection (K 6144 → N 2048)
// at prefill. Counters: FLOP/s, and weight bytes/s (each weight byte is read once per call,
// so decode should approach memory bandwidth).
// MatMul/q8 also runs the 2B down projection (K 6144 → N 2048); its weight bytes include the
// block scales and sums (1 + 8/128 bytes per weight), and FLOP/s counts 2 ops per int8 MAC.
// MatMul/q4 runs the q8 shapes on Q4 weights (0.5 + 4/32 bytes per weight: codes, F16 d and m)
// for every variant, the reference included (its prefill calls take seconds).
// MatMul/q6 runs the LM heads (the int4 head's format, 0.75 + 2/32 bytes per weight) of the 0.6B
// and 2B shapes at decode and batched decode, for every variant.
//
// "bf16/<variant>" is the own kernel (oneDNN routing off); "bf16/onednn" and
// "bf16/onednn_packed" run oneDNN's matmul on [N, K] weights in place and on weights packed
// once (OneDnnPackedBf16), each including the f32 → BF16 rounding of x, as Context::MatMul
// calls them (OneDnnMatMulRoundingX), at every M; "bf16/onednn_cols<C>" runs one-thread oneDNN
// calls per block of C output columns over vlstack's pool (what Context::MatMul routes) (the
// crossover sweep M 8…128 sets kOneDnnMinRows).
//
// Prepare/<format> times weight preparation (ADR 0019) of a BF16 source at the 30B-A3B expert
// shapes (down [2048, 768], gate_up [1536, 2048]): "q4/<quantizer>" and "q6/<quantizer>" for
// every Q4 and Q6 quantizer (reference = the scalar search), "q8", "bf16blocked". chunks=0 splits
// rows as PreparedWeights does (~4 MiB of source per chunk, so one chunk for a 3 MiB expert),
// chunks=1 in 16-row chunks over the pool. Counter weights/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/bf16_blocked.h"
#include "kernels/dispatch.h"
#include "kernels/onednn_matmul.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"

namespace vls::kernels {
namespace {

struct Inputs {
  std::vector<float> x, y;
  std::vector<uint16_t> w;
  Matrix wm;
  Inputs(int64_t M, int64_t K, int64_t N) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    x.resize(static_cast<size_t>(M * K));
    y.resize(static_cast<size_t>(M * N));
    w.resize(static_cast<size_t>(N * K));
    for (float& f : x) f = d(rng);
    for (uint16_t& h : w) h = F32ToBf16(d(rng) * 0.02f);
    wm = Matrix{DType::kBF16, w.data(), N, K};
  }
};

void SetCounters(benchmark::State& state, int64_t M, int64_t K, int64_t N) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * iters, benchmark::Counter::kIsRate);
  state.counters["wbytes/s"] = benchmark::Counter(2.0 * N * K * iters, benchmark::Counter::kIsRate);
}

void BM_MatMul(benchmark::State& state, const KernelVariant* v, Precision p) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  Inputs in(M, K, N);
  Context ctx(static_cast<int>(state.range(3)), p, v);
  ctx.DisableOneDnn();
  for (auto _ : state) {
    ctx.MatMul(in.x.data(), M, K, in.wm, in.y.data());
    benchmark::DoNotOptimize(in.y.data());
  }
  SetCounters(state, M, K, N);
}

// The same product on BF16 blocked weights (bf16_blocked.h): the variant's blocked kernel,
// or with `onednn` oneDNN reading the blocked weights in place from kOneDnnMinRows rows.
void BM_MatMulBlocked(benchmark::State& state, const KernelVariant* v, bool onednn) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  Inputs in(M, K, N);
  std::vector<uint16_t> packed(static_cast<size_t>(Bf16BlockedBytes(N, K) / 2));
  PackBf16Blocked(in.wm, 0, N, packed.data(), N, 0);
  const Matrix wb = Bf16BlockedMatrixAt(packed.data(), N, K);
  Context ctx(static_cast<int>(state.range(3)), Precision::kBF16, v);
  if (!onednn) ctx.DisableOneDnn();
  for (auto _ : state) {
    ctx.MatMul(in.x.data(), M, K, wb, in.y.data());
    benchmark::DoNotOptimize(in.y.data());
  }
  SetCounters(state, M, K, N);
}

void BM_OneDnn(benchmark::State& state, bool packed) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  Inputs in(M, K, N);
  std::unique_ptr<OneDnnPackedBf16> pw;
  if (packed) {
    StatusOr<std::unique_ptr<OneDnnPackedBf16>> r = OneDnnPackedBf16::Create(in.wm, threads);
    if (!r.ok()) return state.SkipWithError(r.status().ToString().c_str());
    pw = std::move(*r);
  }
  ThreadPool pool(threads);  // idle, as in Context::MatMul
  for (auto _ : state) {
    Status s;
    pool.RunExclusive([&] {
      s = OneDnnMatMulRoundingX(in.x.data(), M, K, in.wm, pw.get(), threads, in.y.data());
    });
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(in.y.data());
  }
  SetCounters(state, M, K, N);
}

// oneDNN one thread per block of `cols` output columns, the blocks spread over vlstack's pool.
void BM_OneDnnColumns(benchmark::State& state, int64_t cols) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  Inputs in(M, K, N);
  ThreadPool pool(static_cast<int>(state.range(3)));
  std::vector<uint16_t> xb(in.x.size());
  for (auto _ : state) {
    pool.ParallelFor(M, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b * K; i < e * K; ++i) xb[size_t(i)] = F32ToBf16(in.x[size_t(i)]);
    });
    bool ok = true;
    pool.ParallelFor((N + cols - 1) / cols, 1, [&](int64_t b, int64_t e) {
      const Status s = OneDnnMatMulBf16Columns(xb.data(), M, K, in.wm, b * cols,
                                               std::min(N, e * cols), in.y.data());
      if (!s.ok()) ok = false;
    });
    if (!ok) return state.SkipWithError("oneDNN columns failed");
    benchmark::DoNotOptimize(in.y.data());
  }
  SetCounters(state, M, K, N);
}

void BM_MatMulQ8(benchmark::State& state, const KernelVariant* v) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
  std::vector<float> wf(static_cast<size_t>(N * K));
  for (float& f : x) f = d(rng);
  for (float& f : wf) f = d(rng) * 0.02f;
  const Q8Layout layout = Q8LayoutFor(N, K);
  void* buf = std::aligned_alloc(64, static_cast<size_t>(layout.bytes));
  QuantizeQ8(Matrix{DType::kF32, wf.data(), N, K}, 0, N, buf);
  const Matrix wm = Q8MatrixAt(buf, N, K);
  Context ctx(threads, Precision::kInt8, v);
  for (auto _ : state) {
    ctx.MatMul(x.data(), M, K, wm, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  std::free(buf);
  const double iters = static_cast<double>(state.iterations());
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * iters, benchmark::Counter::kIsRate);
  state.counters["wbytes/s"] =
      benchmark::Counter((1.0 + 8.0 / kQ8Block) * N * K * iters, benchmark::Counter::kIsRate);
}

// The activation quantizer of one Q8 product (single-threaded, as MatMulQ8 runs it below 16
// rows): the batched-decode inputs of the 0.6B layers (K 1024, 2048, 3072) at 8 rows.
void BM_QuantizeQ8(benchmark::State& state, const KernelVariant* v) {
  const int64_t M = state.range(0), K = state.range(1);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K));
  for (float& f : x) f = d(rng);
  Q8Activations a;
  a.Resize(M, K);
  for (auto _ : state) {
    v->quantize_q8(x.data(), 0, M, &a);
    benchmark::DoNotOptimize(a.q.data());
  }
  state.counters["values/s"] =
      benchmark::Counter(static_cast<double>(M * K) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// Packed weights [N, K] of a format, made once per shape and kept for the process: the
// quantizers' searches would take about a minute for an LM head, so at most kQuantizedRows rows
// are quantized (by `pack`, which also repeats their row groups down the matrix: the kernels'
// speed does not depend on the values).
constexpr int64_t kQuantizedRows = 512;  // a multiple of kQ4Rows and kQ6Rows
using PackFn = Matrix (*)(const std::vector<float>& rows_f32, int64_t rows, int64_t N, int64_t K,
                          void* data);
const Matrix& PackedWeights(int64_t N, int64_t K, int64_t bytes, PackFn pack) {
  struct Buffer {
    void* data = nullptr;
    Matrix m;
    ~Buffer() { std::free(data); }
  };
  static std::map<std::tuple<PackFn, int64_t, int64_t>, Buffer> cache;
  Buffer& b = cache[{pack, N, K}];
  if (b.data != nullptr) return b.m;
  const int64_t rows = std::min(N, kQuantizedRows);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(rows * K));
  for (float& f : wf) f = d(rng) * 0.02f;
  b.data = std::aligned_alloc(64, static_cast<size_t>(bytes));
  b.m = pack(wf, rows, N, K, b.data);
  return b.m;
}

// Q4: the blocks of the quantized rows repeated whole (a row group's blocks are contiguous).
Matrix PackQ4(const std::vector<float>& wf, int64_t rows, int64_t N, int64_t K, void* data) {
  QuantizeQ4(Matrix{DType::kF32, wf.data(), rows, K}, 0, rows, data, rows, 0);
  const auto bytes = static_cast<size_t>(Q4Bytes(N, K)),
             part = static_cast<size_t>(Q4Bytes(rows, K));
  auto* base = static_cast<uint8_t*>(data);
  for (size_t off = part; off < bytes; off += part) {
    std::memcpy(base + off, base, std::min(part, bytes - off));
  }
  return Q4MatrixAt(data, N, K);
}
const Matrix& Q4Weights(int64_t N, int64_t K) { return PackedWeights(N, K, Q4Bytes(N, K), PackQ4); }

// Q6: each row group's code blocks and scales repeated (the scales follow all the codes).
Matrix PackQ6(const std::vector<float>& wf, int64_t rows, int64_t N, int64_t K, void* data) {
  std::vector<uint8_t> part(static_cast<size_t>(Q6Bytes(rows, K)));
  QuantizeQ6(Matrix{DType::kF32, wf.data(), rows, K}, 0, rows, part.data(), rows, 0);
  auto* base = static_cast<uint8_t*>(data);
  const int64_t groups = Q6Groups(K), code = groups * kQ6CodeBytes, scale = groups * 32;
  for (int64_t rg = 0; rg < Q6RowGroups(N); ++rg) {
    const int64_t src = rg % Q6RowGroups(rows);
    std::memcpy(base + rg * code, part.data() + src * code, static_cast<size_t>(code));
    std::memcpy(base + Q6ScalesOffset(N, K) + rg * scale,
                part.data() + Q6ScalesOffset(rows, K) + src * scale, static_cast<size_t>(scale));
  }
  return Q6MatrixAt(data, N, K);
}
const Matrix& Q6Weights(int64_t N, int64_t K) { return PackedWeights(N, K, Q6Bytes(N, K), PackQ6); }

// A product on packed weights (Q4 or Q6: `weights` gives the matrix, `bytes` its size).
void BM_MatMulPacked(benchmark::State& state, const KernelVariant* v,
                     const Matrix& (*weights)(int64_t, int64_t),
                     int64_t (*bytes)(int64_t, int64_t)) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
  for (float& f : x) f = d(rng);
  const Matrix& wm = weights(N, K);
  Context ctx(threads, Precision::kInt4, v);
  for (auto _ : state) {
    ctx.MatMul(x.data(), M, K, wm, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * iters, benchmark::Counter::kIsRate);
  state.counters["wbytes/s"] =
      benchmark::Counter(static_cast<double>(bytes(N, K)) * iters, benchmark::Counter::kIsRate);
}

void Q8Shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int64_t m : {1, 8, 512}) {
      b->Args({m, 2048, 6144, threads});
      b->Args({m, 6144, 2048, threads});
    }
    // The 0.6B shapes (QKV, gate/up, down) in 8-slot batched decode.
    b->Args({8, 1024, 4096, threads});
    b->Args({8, 1024, 6144, threads});
    b->Args({8, 3072, 1024, threads});
    // Decode and batched decode of the 0.6B LM head: 160 MB of weights, far past the caches.
    b->Args({1, 1024, 151936, threads});
    b->Args({8, 1024, 151936, threads});
  }
  b->ArgNames({"M", "K", "N", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({1, 2048, 6144, threads});
    b->Args({8, 2048, 6144, threads});
    b->Args({8, 1024, 6144, threads});  // the 0.6B shape's gate/up at batched decode
    // The 0.6B LM head (311 MB in BF16, far past the caches): decode and batched decode.
    b->Args({1, 1024, 151936, threads});
    b->Args({8, 1024, 151936, threads});
    b->Args({512, 2048, 6144, threads});
    b->Args({512, 6144, 2048, threads});
  }
  b->ArgNames({"M", "K", "N", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// The LM heads of the 0.6B (K 1024) and 2B (K 2048) shapes: decode and batched decode.
void HeadShapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int64_t k : {1024, 2048}) {
      for (int64_t m : {1, 4, 8, 16}) b->Args({m, k, 151936, threads});
    }
  }
  b->ArgNames({"M", "K", "N", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// The crossover sweep (M 8…128) for kOneDnnMinRows.
void Crossover(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int64_t M : {8, 16, 32, 64, 128}) b->Args({M, 2048, 6144, threads});
  }
  b->ArgNames({"M", "K", "N", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

using FillFn = void (*)(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                        int64_t dst_row);
using BytesFn = int64_t (*)(int64_t rows, int64_t cols);

// The quantizer Prepare/q4 and Prepare/q6 run (one benchmark at a time).
template <class Q>
const Q*& BenchQuantizer() {
  static const Q* q = nullptr;
  return q;
}
void FillQ4(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
            int64_t dst_row) {
  QuantizeQ4With(*BenchQuantizer<Q4Quantizer>(), src, r0, r1, dst, dst_rows, dst_row);
}
void FillQ6(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
            int64_t dst_row) {
  QuantizeQ6With(*BenchQuantizer<Q6Quantizer>(), src, r0, r1, dst, dst_rows, dst_row);
}
int64_t Q8PreparedBytes(int64_t rows, int64_t cols) { return Q8LayoutFor(rows, cols).bytes; }

// `quantizer`: the Q4 or Q6 quantizer that `fill` runs (nullptr for the other formats).
template <class Q>
void BM_Prepare(benchmark::State& state, const Q* quantizer, FillFn fill, BytesFn bytes) {
  const int64_t N = state.range(0), K = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const bool small_chunks = state.range(3) != 0;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<uint16_t> w(static_cast<size_t>(N * K));
  for (uint16_t& h : w) h = F32ToBf16(d(rng));
  const Matrix src{DType::kBF16, w.data(), N, K};
  std::vector<uint8_t> out(static_cast<size_t>(bytes(N, K)));
  ThreadPool pool(threads);
  const int64_t rows_per_chunk =
      small_chunks ? 16 : std::max<int64_t>(1, (int64_t{4} << 20) / (K * 2));
  const int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  for (auto _ : state) {
    BenchQuantizer<Q>() = quantizer;
    pool.ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1, int) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t r0 = c * rows_per_chunk, r1 = std::min(N, r0 + rows_per_chunk);
        fill(src, r0, r1, out.data(), N, 0);
      }
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["weights/s"] =
      benchmark::Counter(static_cast<double>(N * K) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void PrepareShapes(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {1, 2}) {
    for (int64_t chunks : {0, 1}) {
      if (threads == 1 && chunks == 1) continue;
      b->Args({2048, 768, threads, chunks});
      b->Args({1536, 2048, threads, chunks});
    }
  }
  b->ArgNames({"N", "K", "threads", "chunks"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

int Register() {
  for (const Q4Quantizer* q : SupportedQ4Quantizers()) {
    benchmark::RegisterBenchmark((std::string("Prepare/q4/") + q->name).c_str(),
                                 BM_Prepare<Q4Quantizer>, q, FillQ4, Q4Bytes)
        ->Apply(PrepareShapes);
  }
  for (const Q6Quantizer* q : SupportedQ6Quantizers()) {
    benchmark::RegisterBenchmark((std::string("Prepare/q6/") + q->name).c_str(),
                                 BM_Prepare<Q6Quantizer>, q, FillQ6, Q6Bytes)
        ->Apply(PrepareShapes);
  }
  const Q4Quantizer* none = nullptr;
  benchmark::RegisterBenchmark("Prepare/q8", BM_Prepare<Q4Quantizer>, none,
                               static_cast<FillFn>(QuantizeQ8), Q8PreparedBytes)
      ->Apply(PrepareShapes);
  benchmark::RegisterBenchmark("Prepare/bf16blocked", BM_Prepare<Q4Quantizer>, none,
                               PackBf16Blocked, Bf16BlockedBytes)
      ->Apply(PrepareShapes);
  for (const KernelVariant* v : SupportedVariants()) {
    benchmark::RegisterBenchmark((std::string("MatMul/q4/") + v->name).c_str(), BM_MatMulPacked, v,
                                 Q4Weights, Q4Bytes)
        ->Apply(Q8Shapes);
    benchmark::RegisterBenchmark((std::string("MatMul/q6/") + v->name).c_str(), BM_MatMulPacked, v,
                                 Q6Weights, Q6Bytes)
        ->Apply(HeadShapes);
    if (v == &ReferenceVariant()) continue;  // minutes per prefill call; not worth timing
    benchmark::RegisterBenchmark((std::string("MatMul/f32/") + v->name).c_str(), BM_MatMul, v,
                                 Precision::kF32)
        ->Apply(Shapes);
    if (v->matmul_bf16 != nullptr) {
      for (auto* apply : {Shapes, Crossover}) {
        benchmark::RegisterBenchmark((std::string("MatMul/bf16/") + v->name).c_str(), BM_MatMul, v,
                                     Precision::kBF16)
            ->Apply(apply);
      }
    }
    if (v->matmul_bf16_blocked != nullptr) {
      for (auto* apply : {Shapes, Crossover}) {
        benchmark::RegisterBenchmark((std::string("MatMul/bf16blocked/") + v->name).c_str(),
                                     BM_MatMulBlocked, v, false)
            ->Apply(apply);
      }
      if (OneDnnBf16Available()) {
        benchmark::RegisterBenchmark("MatMul/bf16blocked/onednn", BM_MatMulBlocked, v, true)
            ->Apply(Shapes);
      }
    }
    if (v->matmul_q8 != nullptr) {
      benchmark::RegisterBenchmark((std::string("MatMul/q8/") + v->name).c_str(), BM_MatMulQ8, v)
          ->Apply(Q8Shapes);
      benchmark::RegisterBenchmark((std::string("QuantizeQ8/") + v->name).c_str(), BM_QuantizeQ8, v)
          ->ArgsProduct({{1, 8}, {1024, 3072}})
          ->ArgNames({"M", "K"})
          ->Unit(benchmark::kMicrosecond);
    }
  }
  if (OneDnnBf16Available()) {
    for (auto* apply : {Shapes, Crossover}) {
      benchmark::RegisterBenchmark("MatMul/bf16/onednn", BM_OneDnn, false)->Apply(apply);
      benchmark::RegisterBenchmark("MatMul/bf16/onednn_packed", BM_OneDnn, true)->Apply(apply);
      for (int64_t cols : {256, 512}) {
        benchmark::RegisterBenchmark(("MatMul/bf16/onednn_cols" + std::to_string(cols)).c_str(),
                                     BM_OneDnnColumns, cols)
            ->Apply(apply);
      }
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace vls::kernels

BENCHMARK_MAIN();
