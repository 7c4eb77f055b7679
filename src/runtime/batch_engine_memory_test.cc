// Paged KV memory in the batch engine (issue 33 item 1): a pool smaller than the slots at full
// capacity fills up, sequences are preempted and resumed, and every request still gets the
// tokens it gets alone; a request that could never fit is refused at submit.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"

namespace vls {
namespace {

// The tiny untied test model for `slots` slots of `capacity` rows, with a KV pool of `blocks`
// blocks (0: the default pool).
std::unique_ptr<LoadedModel> LoadWithPool(const std::string& name, int slots, int capacity,
                                          int64_t blocks, int block_keys = kKvBlockKeys) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = JoinPath(tmp ? tmp : "/tmp", "vls_memory_test_" + name);
  TestModelSpec spec;
  spec.deepstack = 2;
  spec.tied = false;
  spec.dtype = DType::kF32;
  spec.seed = 5;
  EXPECT_TRUE(WriteTestCheckpoint(dir, spec, false).ok());
  LoadOptions o;
  o.capacity = capacity;
  o.slots = slots;
  o.threads = 2;
  o.kv_block_keys = block_keys;
  if (blocks > 0) {
    const KvShape shape{spec.layers, spec.kv_heads, spec.head_dim, KvDType::kF32, false};
    o.kv_memory = *KvPool::BlockBytes(shape, block_keys) * static_cast<uint64_t>(blocks);
  }
  auto lm = LoadedModel::Load(dir, o);
  EXPECT_TRUE(lm.ok()) << lm.status().ToString();
  return lm.ok() ? std::move(*lm) : nullptr;
}

// A text prompt of `n` varied ids.
GenerationRequest Prompt(int seed, int n, int max_new) {
  std::vector<int32_t> ids;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < n; ++i) ids.push_back(3 + static_cast<int32_t>(rng() % 60));
  return Text(std::move(ids), seed % 3 - 1, max_new);
}

struct EngineRun {
  std::vector<EngineStream> streams;
  EngineCounters counters;
};

EngineRun RunAll(const LoadedModel& lm, const std::vector<GenerationRequest>& reqs) {
  std::map<uint64_t, EngineStream> got;
  BatchEngine e(lm, [&](const TokenEvent& ev) {
    EngineStream& s = got[ev.request_id];
    if (ev.token >= 0) {
      s.tokens.push_back(ev.token);
      s.logprobs.push_back(ev.logprob);
    }
    if (ev.finish != FinishReason::kNone) s.finish = ev.finish;
    return true;
  });
  std::vector<uint64_t> ids;
  for (GenerationRequest r : reqs) {
    r.logprobs = 0;
    auto id = e.Submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(id.ok() ? *id : 0);
  }
  e.RunUntilIdle();
  EngineRun out;
  for (uint64_t id : ids) out.streams.push_back(got[id]);
  out.counters = e.counters();
  return out;
}

// More conversations than the pool holds at once, with blocks of every size a load allows: 6
// slots of capacity 512 want 6 · 512 positions; the pool holds 448 (7 blocks of 64, 3 of 128 is
// 384, 2 of 256 is 512). Prompts of 40 to 152 rows (chunked beside the decoding streams, one
// with the M-RoPE positions of an image and DeepStack features, one speculating, one sampled)
// and 30 to 70 new tokens each: the pool runs out in the middle of prompts and of replies.
// Every request completes with the tokens (and log-probabilities) it gets from an engine whose
// pool never runs out, and its greedy tokens alone; none fails, and preemptions are counted.
TEST(PagedKvTest, APoolThatRunsOutPreemptsAndEveryRequestStillGetsItsTokens) {
  auto big = LoadWithPool("big", 6, 512, 0);
  ASSERT_TRUE(big);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 9; ++i) reqs.push_back(Prompt(i + 1, 40 + 14 * i, 30 + 5 * i));
  reqs.push_back(Image(*big, 4, true, 50));  // DeepStack features at its pads
  for (int tail = 0; tail < 2; ++tail) {     // two prompts sharing request 7's first 100 rows
    GenerationRequest r = Prompt(8, 138, 40);
    r.tokens.resize(100);
    for (int i = 0; i < 20 + 10 * tail; ++i) r.tokens.push_back(5 + (i * 11 + tail) % 50);
    r.positions = SequentialPositions(PositionMode::kMrope, static_cast<int64_t>(r.tokens.size()));
    reqs.push_back(std::move(r));
  }
  reqs[3].speculative = SpeculativeParams{4, DraftSource::kNgram, 3, 1};
  reqs[5].sampling.temperature = 1.5f;  // sampled: its sampler continues across a preemption
  reqs[5].sampling.seed = 7;
  const EngineRun want = RunAll(*big, reqs);
  EXPECT_EQ(want.counters.preemptions, 0u);
  EXPECT_EQ(want.counters.kv_blocks, 6u * 8u);
  for (const auto& [block_keys, blocks] : {std::pair{64, 7}, {128, 3}, {256, 2}}) {
    SCOPED_TRACE("blocks of " + std::to_string(block_keys));
    auto small = LoadWithPool("small" + std::to_string(block_keys), 6, 512, blocks, block_keys);
    ASSERT_TRUE(small);
    const EngineRun got = RunAll(*small, reqs);
    EXPECT_GT(got.counters.preemptions, 0u);
    EXPECT_EQ(got.counters.kv_blocks, static_cast<uint64_t>(blocks));
    ASSERT_EQ(got.streams.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got.streams[i].finish, FinishReason::kLength) << "request " << i;
      EXPECT_EQ(got.streams[i].tokens, want.streams[i].tokens) << "request " << i;
      if (block_keys == 64 && reqs[i].sampling.temperature == 0.0f) {
        EXPECT_EQ(got.streams[i].tokens, GreedyAlone(*small, reqs[i])) << "request " << i;
      }
      ASSERT_EQ(got.streams[i].logprobs.size(), want.streams[i].logprobs.size());
      for (size_t t = 0; t < got.streams[i].logprobs.size(); ++t) {
        EXPECT_NEAR(got.streams[i].logprobs[t], want.streams[i].logprobs[t], 1e-4)
            << "request " << i << " token " << t;
      }
    }
  }
}

// A request whose prompt and new tokens could never be in the pool, even alone, is refused at
// submit with an error naming the KV memory; one that fits is taken.
TEST(PagedKvTest, ARequestThatCouldNeverFitIsRefusedAtSubmit) {
  auto lm = LoadWithPool("refuse", 2, 512, 3);  // 192 positions
  ASSERT_TRUE(lm);
  BatchEngine e(*lm);
  auto refused = e.Submit(Prompt(1, 150, 50));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("KV memory holds 192"), std::string::npos)
      << refused.status().message();
  ASSERT_TRUE(e.Submit(Prompt(1, 150, 40)).ok());
  e.RunUntilIdle();
}

// The load reports the pool: a given size in whole blocks, the default the slots at full
// capacity.
TEST(PagedKvTest, TheLoadSizesThePool) {
  auto given = LoadWithPool("given", 2, 512, 5);
  auto fallback = LoadWithPool("default", 3, 500, 0);
  ASSERT_TRUE(given && fallback);
  EXPECT_EQ(given->kv_pool_blocks(), 5);
  EXPECT_EQ(given->kv_pool_reason(), "--kv-memory");
  EXPECT_EQ(given->kv_block_keys(), kKvBlockKeys);
  LoadOptions odd;
  odd.capacity = 64;
  odd.kv_block_keys = 32;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const Status st =
      LoadedModel::Load(JoinPath(tmp ? tmp : "/tmp", "vls_memory_test_given"), odd).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("KV block of 32"), std::string::npos) << st.message();
  EXPECT_EQ(fallback->kv_pool_blocks(), 3 * 8);  // ceil(500 / 64) blocks per slot
  EXPECT_EQ(fallback->kv_pool_reason(), "the slots at full capacity");
}

}  // namespace
}  // namespace vls

namespace vls {
namespace {

std::vector<int32_t> Ids(int seed, int n) {
  std::vector<int32_t> ids;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < n; ++i) ids.push_back(3 + static_cast<int32_t>(rng() % 60));
  return ids;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A stream of the engine, collected from events.
struct Collected {
  std::map<uint64_t, EngineStream> streams;
  BatchEngine::EventCallback Callback() {
    return [this](const TokenEvent& ev) {
      EngineStream& s = streams[ev.request_id];
      if (ev.token >= 0) s.tokens.push_back(ev.token);
      if (ev.finish != FinishReason::kNone) s.finish = ev.finish;
      s.cached = ev.cached_tokens;
      return true;
    };
  }
};

TEST(KvPoolTest, NamedBlocksAreSharedCachedAndEvictedLeastRecentlyReleasedFirst) {
  auto pool = KvPool::Create({1, 1, 16, KvDType::kF32, false}, 64, 4).value();
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool->Acquire(2, &a));
  ASSERT_TRUE(pool->Name(a[0], 11));
  ASSERT_TRUE(pool->Name(a[1], 22));
  EXPECT_FALSE(pool->Name(a[1], 33));  // named already
  EXPECT_EQ(pool->Lookup(11), a[0]);
  EXPECT_EQ(pool->Lookup(99), -1);
  ASSERT_TRUE(pool->Share(a[0], 11));  // a second reference
  EXPECT_FALSE(pool->Share(a[0], 22));
  pool->Release(std::span<const int32_t>(&a[1], 1));  // block 22: cached, unreferenced
  pool->Release(std::span<const int32_t>(&a[0], 1));  // block 11: still referenced once
  EXPECT_EQ(pool->cached_blocks(), 1);
  pool->Release(std::span<const int32_t>(&a[0], 1));  // now cached too, released last
  EXPECT_EQ(pool->cached_blocks(), 2);
  EXPECT_EQ(pool->free_blocks(), 4);
  ASSERT_TRUE(pool->Acquire(3, &b));  // 2 free, then the least recently released: 22
  EXPECT_EQ(pool->Lookup(22), -1);
  EXPECT_EQ(pool->Lookup(11), a[0]);
  ASSERT_TRUE(pool->Share(a[0], 11));  // out of the cache again
  EXPECT_EQ(pool->cached_blocks(), 0);
  EXPECT_FALSE(pool->Acquire(1, &b));
}

// A system prompt of 150 rows shared by three conversations: the first computes it, the others
// (admitted while it runs) share its two full blocks instead of prefilling 128 of its rows, and
// every stream is the one it gets alone. Without prefix reuse nothing is shared.
TEST(PrefixCacheTest, ASharedSystemPromptIsComputedOnce) {
  auto lm = LoadWithPool("system", 3, 512, 0);
  ASSERT_TRUE(lm);
  const std::vector<int32_t> system = Ids(1, 150);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(Text(Cat(system, Ids(10 + i, 9 + i)), 0, 12));
  for (const bool reuse : {true, false}) {
    Collected got;
    EngineOptions o;
    o.prefix_reuse = reuse;
    BatchEngine e(*lm, got.Callback(), o);
    std::vector<uint64_t> ids = {e.Submit(reqs[0]).value()};
    e.Step();  // the first prompt's pass: its blocks are named at the end of the step
    for (int i = 1; i < 3; ++i) ids.push_back(e.Submit(reqs[static_cast<size_t>(i)]).value());
    e.RunUntilIdle();
    for (size_t i = 0; i < ids.size(); ++i) {
      const EngineStream& s = got.streams[ids[i]];
      EXPECT_EQ(s.tokens, GreedyAlone(*lm, reqs[i])) << i;
      EXPECT_EQ(s.cached, reuse && i > 0 ? 128 : 0) << i;
    }
    EXPECT_EQ(e.counters().shared_prefix_blocks, reuse ? 4u : 0u);
    EXPECT_EQ(e.counters().copied_prefixes, 0u);
  }
}

// Prompts that arrive together share their system prompt: the first one's prefill computes it,
// and the others wait for its blocks (WaitsForPrefill) instead of each computing it beside it.
TEST(PrefixCacheTest, PromptsArrivingTogetherComputeTheirSharedPrefixOnce) {
  auto lm = LoadWithPool("together", 3, 512, 0);
  ASSERT_TRUE(lm);
  const std::vector<int32_t> system = Ids(1, 150);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Text(Cat(system, Ids(10 + i, 9 + i)), 0, 12));
  reqs.push_back(Text(Ids(40, 90), 0, 6));  // shares nothing: behind them, in order
  for (const int chunk : {0, 64}) {
    Collected got;
    EngineOptions o;
    o.prefill_chunk = chunk;
    BatchEngine e(*lm, got.Callback(), o);
    std::vector<uint64_t> ids;
    for (const GenerationRequest& r : reqs) ids.push_back(e.Submit(r).value());
    e.RunUntilIdle();
    for (size_t i = 0; i < ids.size(); ++i) {
      const EngineStream& s = got.streams[ids[i]];
      EXPECT_EQ(s.tokens, GreedyAlone(*lm, reqs[i])) << chunk << " " << i;
      // 1 and 2 take the first one's two full blocks; 3, once a slot frees, that slot's own
      // 150 rows of the system prompt.
      if (i < 3) {
        EXPECT_EQ(s.cached, i == 0 ? 0 : 128) << chunk << " " << i;
      } else if (i == 3) {
        EXPECT_GE(s.cached, 128) << chunk;
      }
    }
    EXPECT_EQ(e.counters().shared_prefix_blocks, 4u) << chunk;
    EXPECT_EQ(e.counters().copied_prefixes, 0u) << chunk;
  }
}

// A follow-up turn finds its conversation in the prefix cache although other requests took the
// only slot in between: the pool (64 blocks) outlives the slot's rows.
TEST(PrefixCacheTest, AFollowUpTurnFindsItsConversationAfterOthersRan) {
  auto lm = LoadWithPool("followup", 1, 512, 64);
  ASSERT_TRUE(lm);
  Collected got;
  BatchEngine e(*lm, got.Callback());
  const GenerationRequest turn1 = Text(Ids(2, 130), 0, 40);
  const uint64_t first = e.Submit(turn1).value();
  e.RunUntilIdle();
  for (int other = 0; other < 2; ++other) {
    ASSERT_TRUE(e.Submit(Text(Ids(20 + other, 100), 0, 10)).ok());
    e.RunUntilIdle();
  }
  // Turn 2: turn 1's prompt, its reply, a new message.
  GenerationRequest turn2 =
      Text(Cat(Cat(turn1.tokens, got.streams[first].tokens), Ids(3, 20)), 0, 10);
  const uint64_t second = e.Submit(turn2).value();
  e.RunUntilIdle();
  EXPECT_EQ(got.streams[second].cached, 128);  // rows 0..127: two full blocks of 170 committed
  EXPECT_EQ(got.streams[second].tokens, GreedyAlone(*lm, turn2));
  EXPECT_GE(e.counters().shared_prefix_blocks, 2u);
}

// An image prompt whose first block holds visual rows (64 pads from row 4, DeepStack features):
// the same picture sent again, after another request took the only slot, shares that block from
// the cache; a different picture behind the same pad tokens does not (its embedding rows and
// features differ), and both streams are their own.
TEST(PrefixCacheTest, ImagesShareBlocksOnlyWithTheSamePicture) {
  auto lm = LoadWithPool("images", 1, 512, 0);
  ASSERT_TRUE(lm);
  const GenerationRequest a = BigImage(*lm, 1, true, 8, 8), same = BigImage(*lm, 1, true, 8, 8),
                          other = BigImage(*lm, 2, true, 8, 8);
  Collected got;
  BatchEngine e(*lm, got.Callback());
  const uint64_t ia = e.Submit(a).value();
  e.RunUntilIdle();
  ASSERT_TRUE(e.Submit(Text(Ids(5, 100), 0, 4)).ok());  // takes the slot: a's rows leave it
  e.RunUntilIdle();
  const uint64_t is = e.Submit(same).value();
  e.RunUntilIdle();
  const uint64_t io = e.Submit(other).value();
  e.RunUntilIdle();
  EXPECT_EQ(got.streams[is].cached, 64);
  EXPECT_LT(got.streams[io].cached, 4);  // at most the text rows before the picture
  EXPECT_EQ(got.streams[ia].tokens, GreedyAlone(*lm, a));
  EXPECT_EQ(got.streams[is].tokens, got.streams[ia].tokens);
  EXPECT_EQ(got.streams[io].tokens, GreedyAlone(*lm, other));
}

}  // namespace
}  // namespace vls
