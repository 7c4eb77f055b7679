// Model-level checks of the execution options: thread count and kernel variant do not change
// the f32 path beyond summation order, and the bf16 precision keeps the greedy tokens.
#include "model/qwen3_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <vector>

#include "base/scratch_test_util.h"
#include "base/thread_pool.h"
#include "model/test_checkpoint.h"

namespace vls {
namespace {

ModelOptions Options(int threads, kernels::Precision precision, const kernels::KernelVariant* v) {
  ModelOptions o;
  o.threads = threads;
  o.precision = precision;
  o.variant = v;
  return o;
}

std::string TinyModelDir() {
  static const std::string dir = [] {
    // One folder per process (CTest runs this binary's tests as concurrent processes), removed
    // when the process exits.
    std::string d = test::ScratchPath("vls_qwen3_model_test_", "tiny");
    TestModelSpec spec;
    spec.arch = "qwen3";
    spec.vision = false;
    spec.deepstack = 0;
    spec.hidden = 96;  // K = 96 and 192: not multiples of 64 (the bf16 kernel's tail)
    spec.intermediate = 200;
    spec.layers = 2;
    spec.vocab = 301;
    spec.seed = 11;
    EXPECT_TRUE(WriteTestCheckpoint(d, spec, false).ok());
    return d;
  }();
  return dir;
}

// Greedy-decodes `steps` tokens after a fixed prompt; returns the tokens and all logits.
std::vector<int32_t> Greedy(const Qwen3Model& model, int steps, std::vector<float>* all_logits) {
  const int64_t H = model.config().hidden, V = model.config().vocab;
  std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 250, 3};
  const int S = static_cast<int>(prompt.size());
  auto cache = model.NewCache(S + steps).value();
  std::vector<ForwardRow> rows;
  rows.reserve(static_cast<size_t>(S));
  for (int p = 0; p < S; ++p) rows.push_back({cache.get(), p, {p, p, p}});
  std::vector<float> x(static_cast<size_t>(S * H)), h(static_cast<size_t>(H)),
      logits(static_cast<size_t>(V));
  model.Embed(prompt, x.data());
  model.RunLayers(x.data(), rows, nullptr);
  std::vector<int32_t> out;
  const float* last = x.data() + (S - 1) * H;
  for (int step = 0;; ++step) {
    model.FinalNorm(last, 1, h.data());
    model.Logits(h.data(), 1, logits.data());
    all_logits->insert(all_logits->end(), logits.begin(), logits.end());
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (step + 1 == steps) break;
    const int idx = S + step;
    const ForwardRow row{cache.get(), idx, {idx, idx, idx}};
    model.Embed(std::span<const int32_t>(&out.back(), 1), x.data());
    model.RunLayers(x.data(), std::span<const ForwardRow>(&row, 1), nullptr);
    last = x.data();
  }
  return out;
}

TEST(Qwen3ModelTest, EveryVariantAndThreadCountMatchesTheReferenceInF32) {
  ModelOptions ref_opts;
  ref_opts.threads = 1;
  ref_opts.variant = &kernels::ReferenceVariant();
  auto ref = Qwen3Model::Load(TinyModelDir(), ref_opts);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  std::vector<float> ref_logits;
  const std::vector<int32_t> ref_tokens = Greedy(**ref, 6, &ref_logits);
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    for (int threads : {1, 2, 3}) {
      auto m = Qwen3Model::Load(TinyModelDir(), Options(threads, kernels::Precision::kF32, v));
      ASSERT_TRUE(m.ok());
      std::vector<float> logits;
      EXPECT_EQ(Greedy(**m, 6, &logits), ref_tokens) << v->name << " threads " << threads;
      ASSERT_EQ(logits.size(), ref_logits.size());
      for (size_t i = 0; i < logits.size(); ++i) {
        // Only f32 summation order differs; logits are O(1..10).
        ASSERT_NEAR(logits[i], ref_logits[i], 1e-4 * (1 + std::fabs(ref_logits[i])))
            << v->name << " threads " << threads << " at " << i;
      }
    }
  }
}

TEST(Qwen3ModelTest, Bf16PrecisionKeepsTheGreedyTokens) {
  auto f32 = Qwen3Model::Load(TinyModelDir());
  ASSERT_TRUE(f32.ok());
  std::vector<float> f32_logits;
  const std::vector<int32_t> tokens = Greedy(**f32, 8, &f32_logits);
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    auto bf = Qwen3Model::Load(TinyModelDir(), Options(2, kernels::Precision::kBF16, v));
    ASSERT_TRUE(bf.ok());
    EXPECT_EQ((*bf)->context().precision(), kernels::Precision::kBF16);
    std::vector<float> logits;
    EXPECT_EQ(Greedy(**bf, 8, &logits), tokens) << v->name;
    // BF16 keeps 8 significant bits per activation; through 2 layers the logits move by a
    // few percent of their scale at most.
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(double(f32_logits[i])));
      max_diff = std::max(max_diff, std::fabs(double(logits[i]) - f32_logits[i]));
    }
    EXPECT_LT(max_diff, 0.03 * max_abs) << v->name;
  }
}

TEST(Qwen3ModelTest, Int8PrecisionKeepsTheGreedyTokens) {
  auto f32 = Qwen3Model::Load(TinyModelDir());
  ASSERT_TRUE(f32.ok());
  std::vector<float> f32_logits;
  const std::vector<int32_t> tokens = Greedy(**f32, 8, &f32_logits);
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    auto q = Qwen3Model::Load(TinyModelDir(), Options(2, kernels::Precision::kInt8, v));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ((*q)->prepared().layer(0).qkv.format, kernels::MatrixFormat::kQ8);
    EXPECT_EQ((*q)->prepared().lm_head().format, kernels::MatrixFormat::kQ8);
    std::vector<float> logits;
    EXPECT_EQ(Greedy(**q, 8, &logits), tokens) << v->name;
    // Per-block int8 weights and activations: each dot product is off by about 1% of its
    // scale; through 2 layers the logits stay within 10% of the f32 scale (the oracle's
    // int8 tolerance, tests/oracle/run_cases.py).
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(double(f32_logits[i])));
      max_diff = std::max(max_diff, std::fabs(double(logits[i]) - f32_logits[i]));
    }
    EXPECT_LT(max_diff, 0.1 * max_abs) << v->name;
  }
}

// Final hidden states [S, H] of a prefill of `tokens`, run as consecutive RunLayers calls of
// `pieces` rows each (one call: {S}).
std::vector<float> PrefillHidden(const Qwen3Model& model, const std::vector<int32_t>& tokens,
                                 const std::vector<int>& pieces) {
  const int64_t H = model.config().hidden;
  const int S = static_cast<int>(tokens.size());
  auto cache = model.NewCache(S).value();
  std::vector<ForwardRow> rows;
  rows.reserve(static_cast<size_t>(S));
  for (int p = 0; p < S; ++p) rows.push_back({cache.get(), p, {p, p, p}});
  std::vector<float> x(static_cast<size_t>(S * H));  // [S, H]
  model.Embed(tokens, x.data());
  int begin = 0;
  for (int n : pieces) {
    model.RunLayers(x.data() + begin * H,
                    std::span<const ForwardRow>(rows).subspan(static_cast<size_t>(begin),
                                                              static_cast<size_t>(n)),
                    nullptr);
    begin += n;
  }
  EXPECT_EQ(begin, S);
  return x;
}

// A long prefill runs each layer over row chunks (300 rows: two of 150) to bound its
// scratch memory. Every row must come out exactly as when the same rows arrive as separate
// passes (same matmul shapes, attention over the rows written before), at every precision,
// and, in f32, as a row-by-row prefill up to summation order.
TEST(Qwen3ModelTest, ALongPrefillInRowChunksMatchesSeparatePasses) {
  std::vector<int32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 301);
  for (kernels::Precision p :
       {kernels::Precision::kF32, kernels::Precision::kBF16, kernels::Precision::kInt8}) {
    auto m = Qwen3Model::Load(TinyModelDir(), Options(2, p, nullptr));
    ASSERT_TRUE(m.ok());
    const std::vector<float> whole = PrefillHidden(**m, tokens, {300});
    EXPECT_EQ(whole, PrefillHidden(**m, tokens, {150, 150})) << kernels::PrecisionName(p);
    if (p != kernels::Precision::kF32) continue;
    const std::vector<float> by_row = PrefillHidden(**m, tokens, std::vector<int>(300, 1));
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_NEAR(whole[i], by_row[i], 1e-4 * (1 + std::fabs(by_row[i]))) << "at " << i;
    }
  }
}

TEST(Qwen3ModelTest, ThreadCountsOutsideTheBoundAreRefused) {
  for (int threads : {-1, kMaxThreads + 1}) {
    const Status s =
        Qwen3Model::Load(TinyModelDir(), Options(threads, kernels::Precision::kF32, nullptr))
            .status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << threads;
    EXPECT_NE(s.message().find("threads " + std::to_string(threads) + " is outside [0, 1024]"),
              std::string::npos)
        << s.message();
  }
}

// A cache too large to allocate is a status, not std::bad_alloc out of the constructor.
TEST(Qwen3ModelTest, ACacheThatCannotBeAllocatedIsResourceExhausted) {
  auto overflow = KvCache::Create(1 << 30, 1 << 30, 1 << 30, 1 << 30);
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(overflow.status().message().find("overflows"), std::string::npos);
#if !defined(__SANITIZE_ADDRESS__)
  // K alone is 1024 x 2^24 x 64 x 256 x 4 bytes = 2^50: beyond the 47-bit user address space,
  // so no overcommit setting grants it (ASan aborts on such a request by default instead of
  // returning null, so only here).
  auto huge = KvCache::Create(1024, 1 << 24, 64, 256);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("cannot allocate a KV cache of capacity 16777216"),
            std::string::npos)
      << huge.status().message();
#endif
}

TEST(Qwen3ModelTest, ServingMemoryCountsEverySlotsCacheWithoutOverflow) {
  Qwen3Config cfg;
  cfg.layers = 28;
  cfg.kv_heads = 8;
  cfg.head_dim = 128;
  cfg.heads = 16;
  cfg.hidden = 2048;
  cfg.intermediate = 6144;
  cfg.vocab = 151936;
  auto one = PlanServingMemory(cfg, KvDType::kBf16, 4096, 1, 2);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->kv_per_slot, uint64_t{2} * 28 * 4096 * 8 * 128 * 2);  // 448 MiB
  auto many = PlanServingMemory(cfg, KvDType::kBf16, 4096, 16, 2);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->total - many->working, 16 * (one->total - one->working));
  // The documented maxima multiply to far more than 64 bits of bytes would not hold here, but a
  // config's dimensions can: those overflow to an error.
  cfg.layers = 1 << 30;
  cfg.kv_heads = 1 << 30;
  auto overflow = PlanServingMemory(cfg, KvDType::kF32, 1 << 24, 4096, 2);
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(overflow.status().message().find("overflows 64 bits"), std::string::npos);
}

}  // namespace
}  // namespace vls
