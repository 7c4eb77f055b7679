// Paged KV memory (model/kv_pool.h): the pool's accounting, a pooled cache's blocks, and
// attention over caches whose blocks are scattered through a shared pool against the same
// values in a private (contiguous) cache, bit for bit with blocks of every size the engine
// allows, through every kernel variant, whole and split key ranges.
#include "model/kv_pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "model/attention.h"
#include "model/kv_cache.h"

namespace vls {
namespace {

constexpr int kLayers = 2, kLayer = 1, kKvHeads = 2;

TEST(KvPoolTest, AcquireIsAllOrNothingAndReleaseGivesBlocksBack) {
  const KvShape shape{2, 2, 32, KvDType::kBf16, true};
  auto pool = KvPool::Create(shape, 64, 5);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  KvPool& p = **pool;
  EXPECT_EQ(p.block_bytes(), uint64_t{2} * 2 * 2 * 64 * 32 * 2);
  EXPECT_EQ(p.bytes(), 5 * p.block_bytes());
  std::vector<int32_t> a, b;
  EXPECT_TRUE(p.Acquire(3, &a));
  EXPECT_FALSE(p.Acquire(3, &b));  // 2 free: nothing taken
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(p.free_blocks(), 2);
  p.Release(a);
  EXPECT_EQ(p.free_blocks(), 5);
  EXPECT_EQ(KvPool::Create(shape, 24, 5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KvPool::Create(shape, 64, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvPoolTest, APooledCacheHoldsBlocksForWhatItReservesAndGivesThemBack) {
  auto pool = KvPool::Create({2, 2, 32, KvDType::kF32, false}, 64, 4).value();
  {
    KvCache a(pool, 1000), b(pool, 1000);
    EXPECT_EQ(a.blocks_held(), 0);
    ASSERT_TRUE(a.Reserve(65).ok());  // 2 blocks
    EXPECT_EQ(a.blocks_held(), 2);
    ASSERT_TRUE(a.Reserve(100).ok());  // still 2
    EXPECT_EQ(pool->free_blocks(), 2);
    const Status st = b.Reserve(200);  // 4 blocks: 2 free
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(st.message().find("KV memory"), std::string::npos) << st.message();
    EXPECT_EQ(b.blocks_held(), 0);
    EXPECT_EQ(b.Reserve(1001).code(), StatusCode::kOutOfRange);
    std::vector<float> row(64, 1.0f);
    EXPECT_THROW(a.WriteRow(0, 128, row.data(), row.data()), std::out_of_range);
    a.Shrink(10);  // keeps block 0
    EXPECT_EQ(a.blocks_held(), 1);
    EXPECT_EQ(pool->free_blocks(), 3);
    ASSERT_TRUE(b.Reserve(192).ok());
  }
  EXPECT_EQ(pool->free_blocks(), 4);  // the caches gave their blocks back
}

// A private cache and pooled caches on pools of each block size, filled with the same values;
// the pooled caches' blocks interleaved (each pool serves three caches at once) and taken from
// the top of a shuffled free list, so no cache's blocks are contiguous or in order.
struct Twins {
  std::unique_ptr<KvCache> flat;
  std::vector<std::unique_ptr<KvCache>> paged;  // one per block size
};

void Fill(std::vector<KvCache*> caches, int length, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(caches[0]->row_floats())), v(k.size());
  for (int t = 0; t < length; ++t) {
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    for (KvCache* c : caches) c->WriteRow(kLayer, t, k.data(), v.data());
  }
}

TEST(PagedAttentionTest, ScatteredBlocksGiveTheContiguousResultBitForBit) {
  struct Kind {
    KvDType dtype;
    bool tiles;
  };
  const int lengths[] = {1, 77, 300, 2600};
  for (const Kind kind :
       {Kind{KvDType::kF32, false}, Kind{KvDType::kBf16, false}, Kind{KvDType::kBf16, true}}) {
    for (const int64_t D : {64, 128}) {
      const int64_t group = 2;
      const AttentionShape shape{kKvHeads * group, kKvHeads, D};
      const KvShape ks{kLayers, kKvHeads, static_cast<int>(D), kind.dtype, kind.tiles};
      std::vector<std::shared_ptr<KvPool>> pools;
      for (const int P : kKvBlockKeyChoices) {
        pools.push_back(KvPool::Create(ks, P, 2 * (2600 / P + 4)).value());
        // Scatter the free list: take every block, give them back in a shuffled order.
        std::vector<int32_t> ids;
        ASSERT_TRUE(pools.back()->Acquire(pools.back()->blocks(), &ids));
        std::shuffle(ids.begin(), ids.end(), std::mt19937(P));
        pools.back()->Release(ids);
      }
      std::vector<Twins> twins(std::size(lengths));
      for (size_t c = 0; c < std::size(lengths); ++c) {
        twins[c].flat = std::make_unique<KvCache>(kLayers, lengths[c], kKvHeads,
                                                  static_cast<int>(D), kind.dtype, kind.tiles);
        for (const auto& pool : pools)
          twins[c].paged.push_back(std::make_unique<KvCache>(pool, 4096));
      }
      // Interleaved reservations: a block for each cache in turn.
      for (int upto = 64; upto < 2600 + 256; upto += 64) {
        for (size_t c = 0; c < std::size(lengths); ++c) {
          for (auto& p : twins[c].paged) {
            ASSERT_TRUE(p->Reserve(std::min(upto, lengths[c])).ok());
          }
        }
      }
      for (size_t c = 0; c < std::size(lengths); ++c) {
        std::vector<KvCache*> all = {twins[c].flat.get()};
        for (auto& p : twins[c].paged) all.push_back(p.get());
        Fill(all, lengths[c], static_cast<unsigned>(c + 1));
      }
      // Decode rows of every cache, and a prefill chunk across block boundaries.
      auto rows_of = [&](int which) {  // which: -1 the flat caches, else pool index
        std::vector<ForwardRow> rows;
        auto cache = [&](size_t c) {
          return which < 0 ? twins[c].flat.get() : twins[c].paged[static_cast<size_t>(which)].get();
        };
        for (size_t c = 0; c < std::size(lengths); ++c) {
          const int idx = lengths[c] - 1;
          rows.push_back({cache(c), idx, {idx, idx, idx}});
        }
        for (int i = 40; i < 300; i += 3) rows.push_back({cache(2), i, {i, i, i}});
        return rows;
      };
      const std::vector<ForwardRow> flat = rows_of(-1);
      std::mt19937 rng(11);
      std::uniform_real_distribution<float> u(-2.0f, 2.0f);
      std::vector<float> q(flat.size() * static_cast<size_t>(shape.heads * D));
      for (float& x : q) x = u(rng);
      std::vector<const kernels::KernelVariant*> variants = {&kernels::ReferenceVariant()};
      for (const kernels::KernelVariant* v : kernels::SupportedVariants()) variants.push_back(v);
      for (const kernels::KernelVariant* v : variants) {
        const kernels::Context ctx(2, kernels::Precision::kF32, v);
        for (const int64_t range : {int64_t{2048}, int64_t{512}}) {
          std::vector<float> want(q.size()), got(q.size());
          if (v->attention != nullptr) {
            BlockedAttend(ctx, kLayer, shape, q.data(), flat, want.data(), range);
          } else {
            ReferenceAttend(ctx, kLayer, shape, q.data(), flat, want.data());
          }
          for (size_t p = 0; p < pools.size(); ++p) {
            const std::vector<ForwardRow> paged = rows_of(static_cast<int>(p));
            std::fill(got.begin(), got.end(), NAN);
            if (v->attention != nullptr) {
              BlockedAttend(ctx, kLayer, shape, q.data(), paged, got.data(), range);
            } else {
              ReferenceAttend(ctx, kLayer, shape, q.data(), paged, got.data());
            }
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << v->name << " D=" << D << " blocks of " << kKvBlockKeyChoices[p]
                << " range=" << range << " tiles=" << kind.tiles;
          }
        }
      }
    }
  }
}

// A key range that does not start on a key block (a test-only split): the kernels cut blocks at
// page ends, and the result still matches the contiguous one within f32 rounding.
TEST(PagedAttentionTest, UnalignedRangesStillMatch) {
  const int64_t D = 64;
  const AttentionShape shape{4, kKvHeads, D};
  auto pool = KvPool::Create({kLayers, kKvHeads, 64, KvDType::kF32, false}, 64, 40).value();
  KvCache flat(kLayers, 700, kKvHeads, 64), paged(pool, 700);
  std::vector<int32_t> hole;
  ASSERT_TRUE(pool->Acquire(3, &hole));
  ASSERT_TRUE(paged.Reserve(700).ok());
  Fill({&flat, &paged}, 700, 5);
  std::vector<float> q(static_cast<size_t>(shape.heads * D), 0.5f), a(q.size()), b(q.size());
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    if (v->attention == nullptr) continue;
    const kernels::Context ctx(1, kernels::Precision::kF32, v);
    const ForwardRow fr{&flat, 699, {699, 699, 699}}, pr{&paged, 699, {699, 699, 699}};
    BlockedAttend(ctx, kLayer, shape, q.data(), std::span(&fr, 1), a.data(), 100);
    BlockedAttend(ctx, kLayer, shape, q.data(), std::span(&pr, 1), b.data(), 100);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f) << v->name;
  }
  pool->Release(hole);
}

}  // namespace
}  // namespace vls
