// The blocked attention path (every variant with an attention kernel, and a plain scalar tile
// kernel that runs anywhere; 1 and 2 threads; whole and split key ranges) against the
// reference path on random Q/K/V, over f32 and BF16 caches: prefill of one cache, prefill
// continuing a cache, and ragged decode rows of three caches with different lengths in one
// call. Then a BF16 cache against an f32 one holding the same values, and the cache layout.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace vls {
namespace {

constexpr int kLayers = 2, kLayer = 1;

// A plain scalar implementation of the attention tile contract (kernels/attention.h: keys
// [first, last[r]], normalised output, optional log-sum-exp), two-pass in double: it lets the
// blocked path's work split and its combination of split key ranges run on CPUs without the
// AVX-512 kernel (the "plain-tile" variant below).
void PlainTile(const kernels::AttentionTile& w, kernels::ScratchBuffer& /*scratch*/) {
  const int64_t D = w.head_dim;
  auto key = [&](const float* f, const uint16_t* b, int64_t t, int64_t d) {
    const int64_t at = kernels::KeyOffset(w, t) + d;  // a paged cache's keys too
    return f != nullptr ? f[at] : Bf16ToF32(b[at]);
  };
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t j = 0; j < w.group; ++j) {
      const float* q = w.q + r * w.q_row_stride + j * D;
      float* out = w.out + r * w.out_row_stride + j * D;
      std::vector<double> s;
      for (int64_t t = w.first; t <= w.last[r]; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double{q[d]} * key(w.k, w.k_bf16, t, d);
        s.push_back(dot * w.scale);
      }
      const double mx = s.empty() ? 0.0 : *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (size_t i = 0; i < s.size(); ++i) acc += s[i] * key(w.v, w.v_bf16, w.first + i, d);
        out[d] = s.empty() ? 0.0f : static_cast<float>(acc / sum);
      }
      if (w.lse != nullptr) {
        w.lse[r * w.group + j] = s.empty() ? -INFINITY : static_cast<float>(mx + std::log(sum));
      }
    }
  }
}

// The variants whose blocked path Compare checks: every supported one with an attention
// kernel, and the reference variant with PlainTile as its kernel.
std::vector<const kernels::KernelVariant*> BlockedVariants() {
  static const kernels::KernelVariant plain = [] {
    kernels::KernelVariant v = kernels::ReferenceVariant();
    v.name = "plain-tile";
    v.attention = PlainTile;
    return v;
  }();
  std::vector<const kernels::KernelVariant*> out = {&plain};
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    if (v->attention != nullptr) out.push_back(v);
  }
  return out;
}

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
// range_keys > 0: the blocked path with keys cut into ranges of that many (flash-decoding),
// whose partial results are combined by log-sum-exp: a few more roundings per output (the
// rescale of each part and its weighted sum), far inside the same bound.
//
// A variant with BF16 products (attention_bf16_products: AVX512-BF16) over a key-tiled cache rounds
// each query to BF16 and each softmax weight to BF16 (nearest even, relative error at most
// η = 2⁻⁸) before its products. It is compared with the reference over the BF16-rounded
// queries, which leaves the weights' rounding: weights w_t(1 + η_t) renormalised move the output
// o = Σ w_t·v_t by Σ w_t·(η_t - η̄)·(v_t - o) / (1 + η̄), at most 2η/(1 - η)·max|v_t - o|
// <= 4η/(1 - η) ≈ 0.0157 for values in [-1, 1). That worst case needs every weight rounded as
// far as it can go, in the direction that hurts: the largest error seen over these cases was
// 1.5e-3 (a dropped, doubled or misplaced key or column gives ~0.1 and more).
constexpr float kBf16ProductTolerance = 0.016f;

void Compare(const AttentionShape& shape, float q_scale, std::span<const ForwardRow> rows,
             int64_t range_keys = 0) {
  const auto M = static_cast<int64_t>(rows.size());
  const int64_t n = M * shape.heads * shape.head_dim;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-q_scale, q_scale);
  std::vector<float> q(static_cast<size_t>(n));  // [M, nh, D]
  for (float& x : q) x = u(rng);
  const kernels::Context ref_ctx(1, kernels::Precision::kF32, &kernels::ReferenceVariant());
  std::vector<float> want(static_cast<size_t>(n), NAN);
  ReferenceAttend(ref_ctx, kLayer, shape, q.data(), rows, want.data());
  // The reference over the queries rounded to BF16, for variants with BF16 products.
  const bool key_tiles = rows[0].cache->key_tiles();
  std::vector<float> q_bf16(q.size()), want_bf16(q.size(), NAN);
  for (size_t i = 0; i < q.size(); ++i) q_bf16[i] = Bf16ToF32(F32ToBf16(q[i]));
  ReferenceAttend(ref_ctx, kLayer, shape, q_bf16.data(), rows, want_bf16.data());
  int checked = 0;
  for (const kernels::KernelVariant* v : BlockedVariants()) {
    // Other variants read key tiles through the reference path itself: nothing to compare.
    if (key_tiles && !v->attention_bf16_products) continue;
    const bool bf16_products = v->attention_bf16_products && key_tiles;
    const std::vector<float>& ref = bf16_products ? want_bf16 : want;
    const float tol = bf16_products ? kBf16ProductTolerance : 1e-5f;
    for (int threads : {1, 2}) {
      const kernels::Context ctx(threads, kernels::Precision::kF32, v);
      std::vector<float> got(static_cast<size_t>(n), NAN);
      if (range_keys > 0) {
        BlockedAttend(ctx, kLayer, shape, q.data(), rows, got.data(), range_keys);
      } else {
        Attend(ctx, kLayer, shape, q.data(), rows, got.data());
      }
      float worst = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float err = std::fabs(got[static_cast<size_t>(i)] - ref[static_cast<size_t>(i)]);
        worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      }
      EXPECT_LE(worst, tol) << v->name << " threads=" << threads << " M=" << M
                            << " D=" << shape.head_dim << " nh=" << shape.heads
                            << " range_keys=" << range_keys;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

const Case kCases[] = {{128, 1, 1.0f}, {128, 2, 1.0f}, {128, 4, 4.0f},
                       {64, 1, 4.0f},  {64, 2, 1.0f},  {64, 4, 1.0f}};
constexpr int64_t kKvHeads = 2;

// The caches each case runs over: f32, BF16, and BF16 with K in key tiles (KvCache; read by
// the variants with BF16 products, through the reference path by the others).
struct CacheKind {
  KvDType dtype;
  bool tiles;
  const char* name;
};
constexpr CacheKind kKinds[] = {{KvDType::kF32, false, "f32"},
                                {KvDType::kBf16, false, "bf16"},
                                {KvDType::kBf16, true, "bf16 key tiles"}};

// Decode rows of three caches of different lengths in one call, then a prefill chunk of the
// middle cache between decode rows of the others.
void RaggedCase(const Case& c, const CacheKind& kind) {
  const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
  const int lengths[] = {1, 77, 340};
  std::vector<std::unique_ptr<KvCache>> caches;
  std::mt19937 rng(3);
  for (int len : lengths) {
    caches.push_back(std::make_unique<KvCache>(kLayers, len, kKvHeads, static_cast<int>(c.D),
                                               kind.dtype, kind.tiles));
    FillCache(*caches.back(), len, rng);
  }
  std::vector<ForwardRow> rows;
  for (size_t s = 0; s < caches.size(); ++s) {
    const int idx = lengths[s] - 1;
    rows.push_back({caches[s].get(), idx, {idx, idx, idx}});
  }
  Compare(shape, c.q_scale, rows);
  rows = {{caches[0].get(), 0, {0, 0, 0}}};
  for (int i = 50; i < 77; ++i) rows.push_back({caches[1].get(), i, {i, i, i}});
  rows.push_back({caches[2].get(), 339, {339, 339, 339}});
  Compare(shape, c.q_scale, rows);
}

TEST(AttentionTest, PrefillMatchesReference) {
  for (const CacheKind& kind : kKinds) {
    for (const Case& c : kCases) {
      const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
      for (int S : {1, 7, 65, 300}) {
        for (int start : {0, 40}) {  // a fresh prompt, and a chunk continuing a cache
          KvCache cache(kLayers, start + S, static_cast<int>(kKvHeads), static_cast<int>(c.D),
                        kind.dtype, kind.tiles);
          std::mt19937 rng(static_cast<unsigned>(S + start));
          FillCache(cache, start + S, rng);
          std::vector<ForwardRow> rows;
          for (int i = start; i < start + S; ++i) rows.push_back({&cache, i, {i, i, i}});
          SCOPED_TRACE("S=" + std::to_string(S) + " start=" + std::to_string(start) + " " +
                       kind.name);
          Compare(shape, c.q_scale, rows);
        }
      }
    }
  }
}

TEST(AttentionTest, RaggedDecodeAndMixedRowsMatchReference) {
  for (const CacheKind& kind : kKinds) {
    for (const Case& c : kCases) {
      SCOPED_TRACE(kind.name);
      RaggedCase(c, kind);
    }
  }
}

// Key ranges split over work items: decode rows of caches of 1, 77 and 1500 keys (ranges
// shorter than a key block, rows with no key in the later ranges, one key per range), and a
// prefill block of one cache, against the reference.
TEST(AttentionTest, SplitKeyRangesMatchReference) {
  for (const CacheKind& kind : kKinds) {
    for (const Case& c : {kCases[1], kCases[2]}) {
      const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
      const int lengths[] = {1, 77, 1500};
      std::vector<std::unique_ptr<KvCache>> caches;
      std::mt19937 rng(5);
      std::vector<ForwardRow> decode;
      for (int len : lengths) {
        caches.push_back(std::make_unique<KvCache>(kLayers, len, kKvHeads, static_cast<int>(c.D),
                                                   kind.dtype, kind.tiles));
        FillCache(*caches.back(), len, rng);
        decode.push_back({caches.back().get(), len - 1, {len - 1, len - 1, len - 1}});
      }
      std::vector<ForwardRow> prefill;
      for (int i = 1480; i < 1500; ++i) prefill.push_back({caches[2].get(), i, {i, i, i}});
      for (int64_t range_keys : {1, 7, 64, 100, 512, 1499, 1500, 2048}) {
        SCOPED_TRACE(std::string(kind.name) + " range_keys=" + std::to_string(range_keys));
        Compare(shape, c.q_scale, decode, range_keys);
        Compare(shape, c.q_scale, std::span<const ForwardRow>(decode).subspan(2), range_keys);
        Compare(shape, c.q_scale, prefill, range_keys);
      }
    }
  }
}

// Head sizes that are not a multiple of the kernels' vector and register-tile widths (20: a
// partial vector only after two whole ones; 80 and 96: whole vectors but partial register
// tiles; 72: both), with 3 query heads per KV head (a remainder query tile in decode): a
// prefill chunk continuing a cache across a key-block boundary, whole and split into ranges,
// and the decode row alone.
TEST(AttentionTest, OddHeadSizesMatchReference) {
  for (const CacheKind& kind : kKinds) {
    for (const int64_t D : {20, 72, 80, 96}) {
      for (const int64_t group : {1, 3}) {
        const AttentionShape shape{kKvHeads * group, kKvHeads, D};
        constexpr int kStart = 60, kRows = 9;
        KvCache cache(kLayers, kStart + kRows, kKvHeads, static_cast<int>(D), kind.dtype,
                      kind.tiles);
        std::mt19937 rng(static_cast<unsigned>(D + group));
        FillCache(cache, kStart + kRows, rng);
        std::vector<ForwardRow> rows;
        for (int i = kStart; i < kStart + kRows; ++i) rows.push_back({&cache, i, {i, i, i}});
        SCOPED_TRACE(std::string(kind.name) + " D=" + std::to_string(D) +
                     " group=" + std::to_string(group));
        Compare(shape, 2.0f, rows);
        Compare(shape, 2.0f, rows, 32);
        Compare(shape, 2.0f, std::span<const ForwardRow>(rows).subspan(kRows - 1));
      }
    }
  }
}

// Batch invariance: a row's output is bit for bit the same whether it is attended alone, with
// rows of other caches, or with the rows after it in its own cache (a speculative verify
// pass), at every thread count, split into ranges or not. Speculative decoding's greedy
// parity and the engine's solo-vs-batched parity rest on this.
TEST(AttentionTest, RowResultsDoNotDependOnTheOtherRows) {
  const Case c = kCases[2];
  const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
  for (const bool tiles : {false, true}) {
    SCOPED_TRACE(tiles ? "bf16 key tiles" : "bf16");
    const int lengths[] = {300, 1000};
    std::vector<std::unique_ptr<KvCache>> caches;
    std::mt19937 rng(9);
    for (int len : lengths) {
      caches.push_back(std::make_unique<KvCache>(kLayers, len, kKvHeads, static_cast<int>(c.D),
                                                 KvDType::kBf16, tiles));
      FillCache(*caches.back(), len, rng);
    }
    const int64_t row_floats = shape.heads * shape.head_dim;
    std::uniform_real_distribution<float> u(-c.q_scale, c.q_scale);
    std::vector<float> q(static_cast<size_t>(12 * row_floats));  // up to 12 rows
    for (float& x : q) x = u(rng);
    // Row of interest: cache 1 at index 990, always first, with the same query.
    const ForwardRow solo = {caches[1].get(), 990, {990, 990, 990}};
    std::vector<std::vector<ForwardRow>> calls = {{solo}};
    calls.push_back({solo, {caches[0].get(), 299, {299, 299, 299}}});
    std::vector<ForwardRow> verify = {solo};
    for (int i = 991; i < 1000; ++i) verify.push_back({caches[1].get(), i, {i, i, i}});
    calls.push_back(verify);
    for (const kernels::KernelVariant* v : BlockedVariants()) {
      for (int64_t range_keys : {int64_t{128}, int64_t{500}, kAttentionRangeKeys}) {
        std::vector<float> want;
        for (int threads : {1, 2, 3}) {
          const kernels::Context ctx(threads, kernels::Precision::kF32, v);
          for (const auto& rows : calls) {
            std::vector<float> got(rows.size() * static_cast<size_t>(row_floats), NAN);
            BlockedAttend(ctx, kLayer, shape, q.data(), rows, got.data(), range_keys);
            got.resize(static_cast<size_t>(row_floats));  // the first row's output
            if (want.empty()) want = got;
            EXPECT_EQ(got, want) << v->name << " threads=" << threads << " rows=" << rows.size()
                                 << " range_keys=" << range_keys;
          }
        }
      }
    }
  }
}

TEST(AttentionTest, Bf16CacheStaysWithinBf16RoundingOfTheF32Cache) {
  // The same keys and values in an f32 and a BF16 cache; the reference path over each. BF16
  // rounding moves every stored value by at most 2^-9 relative (|k|, |v| < 1). An output is a
  // convex combination of values: their rounding moves it by at most 2^-9 ≈ 2e-3; the scores
  // (scale·q·k over D terms of random sign) move by about 2^-9·|q|·|k|·√D·scale ≈ 1e-3 at
  // q_scale 1, which moves the softmax weights by about that relatively. 8e-3 bounds both
  // with room; the largest error seen was about 2e-3 (a bug reading wrong rows gives ~0.5).
  for (const Case& c : kCases) {
    if (c.q_scale != 1.0f) continue;
    const AttentionShape shape{kKvHeads * c.group, kKvHeads, c.D};
    constexpr int kLen = 130;
    KvCache f32(kLayers, kLen, kKvHeads, static_cast<int>(c.D), KvDType::kF32);
    KvCache bf16(kLayers, kLen, kKvHeads, static_cast<int>(c.D), KvDType::kBf16);
    std::mt19937 a(11), b(11);
    FillCache(f32, kLen, a);
    FillCache(bf16, kLen, b);
    std::vector<ForwardRow> rf, rb;
    for (int i = 0; i < kLen; i += 43) {
      rf.push_back({&f32, i, {i, i, i}});
      rb.push_back({&bf16, i, {i, i, i}});
    }
    const int64_t n = static_cast<int64_t>(rf.size()) * shape.heads * shape.head_dim;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(n)), want(q.size()), got(q.size());
    for (float& x : q) x = u(rng);
    const kernels::Context ctx(1, kernels::Precision::kF32, &kernels::ReferenceVariant());
    ReferenceAttend(ctx, kLayer, shape, q.data(), rf, want.data());
    ReferenceAttend(ctx, kLayer, shape, q.data(), rb, got.data());
    float worst = 0.0f;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, 8e-3f) << "D=" << c.D << " group=" << c.group;
    EXPECT_GT(worst, 0.0f) << "the BF16 cache should round";
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

TEST(KvCacheTest, Bf16CacheRoundsOnWriteWidensOnReadAndHalvesTheBytes) {
  KvCache f32(2, 5, 3, 16);
  KvCache cache(2, 5, 3, 16, KvDType::kBf16);
  EXPECT_EQ(cache.dtype(), KvDType::kBf16);
  EXPECT_EQ(2 * cache.bytes(), f32.bytes());
  std::vector<float> k(48), v(48), k2(48), v2(48);
  for (int i = 0; i < 48; ++i) k[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i) / 1000.0f;
  for (int i = 0; i < 48; ++i) v[static_cast<size_t>(i)] = -3.14159f * static_cast<float>(i);
  cache.WriteRow(1, 3, k.data(), v.data());
  EXPECT_EQ(cache.k_head_bf16(1, 2)[3 * 16 + 5], F32ToBf16(k[37]));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cache.v_head_bf16(0, 0)) % 64, 0u);
  cache.ReadRows(1, 3, 1, k2.data(), v2.data());
  int rounded = 0;
  for (size_t i = 0; i < 48; ++i) {
    EXPECT_EQ(k2[i], Bf16ToF32(F32ToBf16(k[i])));
    EXPECT_EQ(v2[i], Bf16ToF32(F32ToBf16(v[i])));
    rounded += k2[i] != k[i] ? 1 : 0;
  }
  EXPECT_GT(rounded, 0);
  std::vector<float> head(16);
  cache.ReadHead(true, 1, 2, 3 * 16, 16, head.data());
  EXPECT_EQ(head[5], v2[37]);
}

// Key tiles (KvCache): pair c of key t at uint32 (t / 16)·(D/2)·16 + c·16 + t % 16 of its head,
// capacity padded to whole tiles; values, reads and widening as in the row layout. Heads not a
// multiple of 32 wide and f32 caches ignore the request.
TEST(KvCacheTest, KeyTilesStorePairsOfSixteenKeysAndReadBackAsRows) {
  constexpr int kD = 64, kHeads = 2, kCap = 37;  // 3 tiles, the last one padded
  KvCache rows(2, kCap, kHeads, kD, KvDType::kBf16);
  KvCache tiles(2, kCap, kHeads, kD, KvDType::kBf16, true);
  EXPECT_FALSE(rows.key_tiles());
  ASSERT_TRUE(tiles.key_tiles());
  EXPECT_EQ(tiles.capacity(), kCap);
  EXPECT_EQ(tiles.bytes(), 2u * 2 * 48 * kHeads * kD * 2);  // K and V, 2 layers, 48 keys
  EXPECT_EQ(KvCache::Bytes(2, kCap, kHeads, kD, KvDType::kBf16, true), tiles.bytes());
  EXPECT_FALSE(KvCache(2, kCap, kHeads, 48, KvDType::kBf16, true).key_tiles());
  EXPECT_FALSE(KvCache(2, kCap, kHeads, kD, KvDType::kF32, true).key_tiles());
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> k(kHeads * kD), v(k.size());
  std::vector<std::vector<float>> ks;
  for (int t = 0; t < kCap; ++t) {
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    rows.WriteRow(1, t, k.data(), v.data());
    tiles.WriteRow(1, t, k.data(), v.data());
    ks.push_back(k);
  }
  const auto* pairs = reinterpret_cast<const uint32_t*>(tiles.k_head_bf16(1, 1));
  for (int t : {0, 15, 16, 33, kCap - 1}) {
    for (int c : {0, 1, kD / 2 - 1}) {
      const uint32_t want = F32ToBf16(ks[t][kD + 2 * c]) |
                            static_cast<uint32_t>(F32ToBf16(ks[t][kD + 2 * c + 1])) << 16;
      EXPECT_EQ(pairs[(t / 16) * (kD / 2) * 16 + c * 16 + t % 16], want) << t << " " << c;
    }
  }
  std::vector<float> a(static_cast<size_t>(kCap) * kHeads * kD), b(a.size()), av(a.size()),
      bv(a.size());
  rows.ReadRows(1, 0, kCap, a.data(), av.data());
  tiles.ReadRows(1, 0, kCap, b.data(), bv.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(av, bv);
  std::vector<float> ha(static_cast<size_t>(kCap) * kD), hb(ha.size());
  rows.ReadHead(false, 1, 1, 5, kCap * kD - 5, ha.data());
  tiles.ReadHead(false, 1, 1, 5, kCap * kD - 5, hb.data());
  EXPECT_EQ(ha, hb);
}

// KvCache::CopyPrefixFrom (prefix reuse across slots): the copied rows read back as the
// source's in every layout (f32, BF16, BF16 key tiles with a partial last tile); the rows after
// them keep the destination's; a cache of another layout is refused.
TEST(KvCacheTest, CopyPrefixFromCopiesExactlyTheRows) {
  struct Layout {
    KvDType dtype;
    bool tiles;
  };
  for (const Layout& lay : {Layout{KvDType::kF32, false}, Layout{KvDType::kBf16, false},
                            Layout{KvDType::kBf16, true}}) {
    const int L = 2, C = 40, nkv = 2, D = 32, rows = 19;
    KvCache src(L, C, nkv, D, lay.dtype, lay.tiles), dst(L, C, nkv, D, lay.dtype, lay.tiles);
    std::mt19937 rng(7);
    std::normal_distribution<float> n;
    std::vector<float> k(static_cast<size_t>(nkv * D)), v(k.size());
    for (int l = 0; l < L; ++l) {
      for (int t = 0; t < C; ++t) {
        for (float& x : k) x = n(rng);
        for (float& x : v) x = n(rng);
        src.WriteRow(l, t, k.data(), v.data());
        for (float& x : k) x = n(rng);
        for (float& x : v) x = n(rng);
        dst.WriteRow(l, t, k.data(), v.data());
      }
    }
    std::vector<float> before_k(static_cast<size_t>(C * nkv * D)), before_v(before_k.size());
    dst.ReadRows(1, 0, C, before_k.data(), before_v.data());
    ASSERT_TRUE(dst.CopyPrefixFrom(src, rows));
    for (int l = 0; l < L; ++l) {
      std::vector<float> sk(before_k.size()), sv(sk.size()), dk(sk.size()), dv(sk.size());
      src.ReadRows(l, 0, C, sk.data(), sv.data());
      dst.ReadRows(l, 0, C, dk.data(), dv.data());
      const size_t cut = static_cast<size_t>(rows * nkv * D);
      EXPECT_TRUE(std::equal(sk.begin(), sk.begin() + cut, dk.begin())) << l;
      EXPECT_TRUE(std::equal(sv.begin(), sv.begin() + cut, dv.begin())) << l;
      if (l == 1) {  // the values after the copied rows are the destination's own
        EXPECT_TRUE(std::equal(before_v.begin() + cut, before_v.end(), dv.begin() + cut));
      }
    }
    KvCache other(L, C, nkv, D, lay.dtype == KvDType::kF32 ? KvDType::kBf16 : KvDType::kF32);
    EXPECT_FALSE(other.CopyPrefixFrom(src, rows));
    EXPECT_FALSE(dst.CopyPrefixFrom(src, C + 1));
  }
}

}  // namespace
}  // namespace vls
