// The blocked attention path (every variant with an attention kernel, 1 and 2 threads) against
// the reference path on random Q/K/V: prefill of one cache, prefill continuing a cache, and
// ragged decode rows of three caches with different lengths in one call.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

namespace vls {
namespace {

constexpr int kLayers = 2, kLayer = 1;

struct Case {
  int64_t D, group;
  float q_scale;  // larger: peakier softmax, the running max moves between key blocks
};

// Fills keys and values [0, length) of every head of `kLayer` with uniform [-1, 1).
void FillCache(KvCache& cache, int length, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(cache.row_floats())), v(k.size());
  for (int t = 0; t < length; ++t) {
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    cache.WriteRow(kLayer, t, k.data(), v.data());
  }
}

// Runs both paths over `rows` and compares. Outputs are convex combinations of values in
// [-1, 1), so an absolute bound is a relative one. Both compute in f32 and differ in
// summation order (16-lane trees vs sequential dot products and P·V sums), in the online
// rescaling by exp(m_old - m_new) per key block and in the exp polynomial (~1 ulp): each
// output is off by a few ulps times the number of terms along its longest sum; 1e-5 is about
// 100 ulps of 1.0 (the largest error seen over all cases was 9e-7).
void Compare(const AttentionShape& shape, float q_scale, std::span<const ForwardRow> rows) {
  const auto M = static_cast<int64_t>(rows.size());
  const int64_t n = M * shape.heads * shape.head_dim;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-q_scale, q_scale);
  std::vector<float> q(static_cast<size_t>(n));  // [M, nh, D]
  for (float& x : q) x = u(rng);
  const kernels::Context ref_ctx(1, kernels::Precision::kF32, &kernels::ReferenceVariant());
  std::vector<float> want(static_cast<size_t>(n), NAN);
  ReferenceAttend(ref_ctx, kLayer, shape, q.data(), rows, want.data());
  int checked = 0;
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    if (v->attention == nullptr) continue;
    for (int threads : {1, 2}) {
      const kernels::Context ctx(threads, kernels::Precision::kF32, v);
      std::vector<float> got(static_cast<size_t>(n), NAN);
      Attend(ctx, kLayer, shape, q.data(), rows, got.data());
      float worst = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float err = std::fabs(got[static_cast<size_t>(i)] - want[static_cast<size_t>(i)]);
        worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      }
      EXPECT_LE(worst, 1e-5f) << v->name << " threads=" << threads << " M=" << M
                              << " D=" << shape.head_dim << " nh=" << shape.heads;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no variant with an attention kernel on this CPU";
}

const Case kCases[] = {{128, 1, 1.0f}, {128, 2, 1.0f}, {128, 4, 4.0f},
                       {64, 1, 4.0f},  {64, 2, 1.0f},  {64, 4, 1.0f}};
constexpr int64_t kKvHeads = 2;

TEST(AttentionTest, PrefillMatchesReference) {
  for (const Case& c : kCases) {
    const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
    for (int S : {1, 7, 65, 300}) {
      for (int start : {0, 40}) {  // a fresh prompt, and a chunk continuing a cache
        KvCache cache(kLayers, start + S, static_cast<int>(kKvHeads), static_cast<int>(c.D));
        std::mt19937 rng(static_cast<unsigned>(S + start));
        FillCache(cache, start + S, rng);
        std::vector<ForwardRow> rows;
        for (int i = start; i < start + S; ++i) rows.push_back({&cache, i, {i, i, i}});
        SCOPED_TRACE("S=" + std::to_string(S) + " start=" + std::to_string(start));
        Compare(shape, c.q_scale, rows);
      }
    }
  }
}

TEST(AttentionTest, RaggedDecodeAndMixedRowsMatchReference) {
  for (const Case& c : kCases) {
    const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
    const int lengths[] = {1, 77, 340};
    std::vector<std::unique_ptr<KvCache>> caches;
    std::mt19937 rng(3);
    for (int len : lengths) {
      caches.push_back(std::make_unique<KvCache>(kLayers, len, kKvHeads, static_cast<int>(c.D)));
      FillCache(*caches.back(), len, rng);
    }
    // One decode row per cache, each attending its own length.
    std::vector<ForwardRow> rows;
    for (size_t s = 0; s < caches.size(); ++s) {
      const int idx = lengths[s] - 1;
      rows.push_back({caches[s].get(), idx, {idx, idx, idx}});
    }
    Compare(shape, c.q_scale, rows);
    // A prefill chunk of the middle cache between decode rows of the others.
    rows = {{caches[0].get(), 0, {0, 0, 0}}};
    for (int i = 50; i < 77; ++i) rows.push_back({caches[1].get(), i, {i, i, i}});
    rows.push_back({caches[2].get(), 339, {339, 339, 339}});
    Compare(shape, c.q_scale, rows);
  }
}

TEST(KvCacheTest, HeadMajorLayoutRoundTripsRows) {
  KvCache cache(2, 5, 3, 16);
  std::vector<float> k(48), v(48), k2(48), v2(48);
  for (int i = 0; i < 48; ++i) k[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int i = 0; i < 48; ++i) v[static_cast<size_t>(i)] = static_cast<float>(-i);
  cache.WriteRow(1, 3, k.data(), v.data());
  // Head 2's position 3 of layer 1 is contiguous at k_head(1, 2) + 3·D.
  EXPECT_EQ(cache.k_head(1, 2)[3 * 16 + 5], 37.0f);
  EXPECT_EQ(cache.v_head(1, 2)[3 * 16 + 5], -37.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cache.k_head(0, 0)) % 64, 0u);
  cache.ReadRows(1, 3, 1, k2.data(), v2.data());
  EXPECT_EQ(k2, k);
  EXPECT_EQ(v2, v);
  cache.ReadRows(0, 3, 1, k2.data(), nullptr);
  EXPECT_EQ(k2, std::vector<float>(48, 0.0f));
}

}  // namespace
}  // namespace vls
