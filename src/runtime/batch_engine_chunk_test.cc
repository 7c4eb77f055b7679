// Chunked prefill, prefix reuse, log-probabilities and re-entrant callbacks of the batch engine.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <new>
#include <random>
#include <thread>

#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"

namespace vls {
namespace {

using Stream = EngineStream;

std::vector<GenerationRequest> MixedRequests(const LoadedModel& lm) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(Text({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0, 5));
  reqs.push_back(BigImage(lm, 1, true, 3, 5));   // DeepStack, 9 pads at rows 4..12
  reqs.push_back(Text({9, 8, 7, 6, 5}, -2, 6));  // M-RoPE with a negative delta
  reqs.push_back(BigImage(lm, 2, false, 2, 4));  // visual rows without DeepStack
  reqs.push_back(Image(*&lm, 3, true, 4));       // the 4-pad fixture
  reqs.push_back(Text({5, 6, 7, 8, 9, 10, 12}, 3, 5));
  return reqs;
}

void ExpectSame(const std::vector<Stream>& got, const std::vector<Stream>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << " request " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << what << " request " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
      // The f32 path computes every row the same way whatever the pass holds; a chunk differs
      // from the whole pass only in the f32 summation order of its attention tiles.
      EXPECT_NEAR(got[i].logprobs[t], want[i].logprobs[t], 1e-4)
          << what << " request " << i << " token " << t;
    }
  }
}

// Any chunk size gives the streams of the unchunked prefill, with chunk boundaries inside the
// visual spans and DeepStack payloads sliced per chunk.
TEST(ChunkedPrefillTest, AnyChunkSizeMatchesTheUnchunkedPrefill) {
  auto lm = LoadModel("chunks", 2, 64);
  ASSERT_TRUE(lm);
  const auto reqs = MixedRequests(*lm);
  EngineOptions whole;
  whole.prefill_chunk = 0;
  whole.prefix_reuse = false;
  const auto want = RunStreams(*lm, reqs, whole);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(want[i].tokens, GreedyAlone(*lm, reqs[i])) << "request " << i;
  }
  for (int chunk : {1, 2, 3, 5, 64}) {
    EngineOptions o;
    o.prefill_chunk = chunk;
    o.prefix_reuse = false;
    ExpectSame(RunStreams(*lm, reqs, o), want, "chunk " + std::to_string(chunk));
  }
}

// The chunk budget adapts (issue 33): a prompt with nothing else decoding is prefilled in one
// pass whatever `prefill_chunk` says; beside a decoding stream it is cut into chunks of the
// option's size, each in the same pass as the stream's decode row.
TEST(ChunkedPrefillTest, ThePromptOfAnIdleEngineGoesInOnePassAndBesideAStreamInChunks) {
  auto lm = LoadModel("adaptive", 2, 64);
  ASSERT_TRUE(lm);
  std::vector<int32_t> long_ids;
  for (int i = 0; i < 30; ++i) long_ids.push_back(3 + (i * 7) % 50);
  EngineOptions o;
  o.prefill_chunk = 4;
  o.prefix_reuse = false;
  {
    BatchEngine e(*lm, nullptr, o);
    ASSERT_TRUE(e.Submit(Text(long_ids, 0, 2)).ok());
    e.RunUntilIdle();
    EXPECT_EQ(e.counters().prefill_chunks, 1u);
    EXPECT_EQ(e.counters().mixed_passes, 0u);
  }
  const GenerationRequest a = Text({5, 6, 7, 8, 9}, 1, 20), b = Text(long_ids, -3, 3);
  std::map<uint64_t, std::vector<int32_t>> got;
  BatchEngine e(
      *lm,
      [&](const TokenEvent& ev) {
        if (ev.token >= 0) got[ev.request_id].push_back(ev.token);
        return true;
      },
      o);
  const uint64_t ia = e.Submit(a).value();
  e.Step();  // a prefilled whole, its first token sampled; it decodes from the next step on
  const uint64_t ib = e.Submit(b).value();
  e.RunUntilIdle();
  // b: 30 rows in chunks of 4 (8 chunks), each beside a's decode row.
  EXPECT_EQ(e.counters().prefill_chunks, 1u + 8u);
  EXPECT_EQ(e.counters().mixed_passes, 8u);
  EXPECT_EQ(got[ia], GreedyAlone(*lm, a));
  EXPECT_EQ(got[ib], GreedyAlone(*lm, b));
}

// A step's pass that fails runs its parts again in passes of their own: nobody's request fails
// for it, and every stream is the one it gets alone.
TEST(ChunkedPrefillTest, AFailedPassRunsItsPartsAlone) {
  auto lm = LoadModel("failed_pass", 2, 64);
  ASSERT_TRUE(lm);
  const GenerationRequest a = Text({5, 6, 7, 8, 9}, 1, 12),
                          b = Text({3, 1, 4, 1, 5, 9, 2, 6}, 2, 4);
  int failures = 0;
  EngineOptions o;
  o.prefill_chunk = 3;
  o.prefix_reuse = false;
  o.fault_hook_for_testing = [&](std::string_view point, uint64_t id) {
    if (point == "step" && id == 2 && failures < 2) {
      ++failures;
      throw std::bad_alloc();
    }
  };
  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, FinishReason> finish;
  BatchEngine e(
      *lm,
      [&](const TokenEvent& ev) {
        if (ev.token >= 0) got[ev.request_id].push_back(ev.token);
        if (ev.finish != FinishReason::kNone) finish[ev.request_id] = ev.finish;
        return true;
      },
      o);
  const uint64_t ia = e.Submit(a).value();
  e.Step();
  const uint64_t ib = e.Submit(b).value();
  e.RunUntilIdle();
  EXPECT_EQ(failures, 2);
  EXPECT_EQ(finish[ia], FinishReason::kLength);
  EXPECT_EQ(finish[ib], FinishReason::kLength);
  EXPECT_EQ(got[ia], GreedyAlone(*lm, a));
  EXPECT_EQ(got[ib], GreedyAlone(*lm, b));
  EXPECT_EQ(e.counters().mixed_passes, 1u);  // b's third chunk; its first two ran alone
}

// The DeepStack features matter for these requests, so a chunk that dropped or doubled them
// could not pass the test above.
TEST(ChunkedPrefillTest, TheDeepStackPayloadChangesTheStream) {
  auto lm = LoadModel("chunks_ds", 1, 64);
  ASSERT_TRUE(lm);
  GenerationRequest with = BigImage(*lm, 1, true, 3, 5);
  GenerationRequest without = BigImage(*lm, 1, false, 3, 5);
  EngineOptions o;
  o.prefill_chunk = 0;
  const auto a = RunStreams(*lm, {with}, o);
  const auto b = RunStreams(*lm, {without}, o);
  EXPECT_GT(std::fabs(a[0].logprobs[0] - b[0].logprobs[0]) + (a[0].tokens != b[0].tokens ? 1 : 0),
            1e-3);
}

TEST(ChunkedPrefillTest, DeepStackSliceRebasesPositionsAndKeepsExactlyTheChunkRows) {
  const int64_t H = 3;
  HostTensor pos = HostTensor::FromI32({4}, std::vector<int32_t>{2, 3, 4, 9});
  HostTensor feat(DType::kF32, {2, 4, H});
  for (int64_t i = 0; i < feat.numel(); ++i) feat.f32()[i] = static_cast<float>(i);
  HostTensor layers = HostTensor::FromI32({2}, std::vector<int32_t>{0, 1});
  auto p = DeepStackPayload::Create(pos.view(), feat.view(), layers.view()).value();
  const DeepStackPayload s = p.Slice(3, 9);  // rows 3..8: visual rows 3 and 4
  ASSERT_EQ(s.num_visual(), 2);
  EXPECT_EQ(std::vector<int32_t>(s.positions().begin(), s.positions().end()),
            (std::vector<int32_t>{0, 1}));
  for (int64_t k = 0; k < 2; ++k) {
    for (int64_t i = 0; i < 2 * H; ++i) {
      EXPECT_EQ(s.features(k)[i], p.features(k)[H + i]) << k << "," << i;
    }
  }
  EXPECT_EQ(p.Slice(5, 9).num_visual(), 0);
  EXPECT_EQ(p.Slice(0, 10).num_visual(), 4);
}

// The second turn of a conversation reuses the first turn's rows (prompt and fed generated
// tokens) and gives the stream it gives without reuse.
TEST(PrefixReuseTest, ASecondTurnReusesTheFirstTurnsRowsWithTheSameOutput) {
  auto lm = LoadModel("reuse", 1, 64);
  ASSERT_TRUE(lm);
  const std::vector<int32_t> turn1 = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  GenerationRequest r1 = Text(turn1, 0, 4);
  const std::vector<int32_t> gen1 = GreedyAlone(*lm, r1);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), gen1.begin(), gen1.end());
  for (int32_t t : {21, 22, 23}) turn2.push_back(t);
  GenerationRequest r2 = Text(turn2, 0, 5);
  for (int chunk : {0, 4}) {
    EngineOptions reuse;
    reuse.prefill_chunk = chunk;
    EngineOptions none = reuse;
    none.prefix_reuse = false;
    const auto with = RunStreams(*lm, {r1, r2}, reuse);
    const auto without = RunStreams(*lm, {r1, r2}, none);
    ExpectSame(with, without, "reuse chunk " + std::to_string(chunk));
    EXPECT_EQ(with[1].tokens, GreedyAlone(*lm, r2));
    // Turn 1's prompt and the 3 generated tokens that were fed back (the 4th was only sampled).
    EXPECT_EQ(with[0].cached, 0);
    EXPECT_EQ(with[1].cached, static_cast<int32_t>(turn1.size() + 3));
    EXPECT_EQ(without[1].cached, 0);
  }
  // The same prompt again: all rows but the last come from the cache.
  const auto again = RunStreams(*lm, {r1, r1}, EngineOptions{});
  EXPECT_EQ(again[1].cached, static_cast<int32_t>(turn1.size() - 1));
  EXPECT_EQ(again[1].tokens, again[0].tokens);
}

// A new conversation that shares only its first rows with a slot's conversation (a chat
// template's opening tokens) takes an empty slot rather than evict that conversation, whose next
// turn then reuses all its rows; a slot is a match when the prompt keeps half its rows or more.
TEST(PrefixReuseTest, ANewConversationDoesNotEvictAnotherForAFewSharedRows) {
  auto lm = LoadModel("reuse_slots", 2, 64);
  ASSERT_TRUE(lm);
  const std::vector<int32_t> x1 = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  const std::vector<int32_t> y = {3, 1, 7, 7, 7, 8, 8, 8};  // shares 2 rows with x1
  std::map<uint64_t, int32_t> cached;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    cached[ev.request_id] = ev.cached_tokens;
    if (ev.token >= 0) tokens[ev.request_id].push_back(ev.token);
    return true;
  });
  auto run = [&](const std::vector<int32_t>& ids, int max_new) {
    auto id = e.Submit(Text(ids, 0, max_new));
    EXPECT_TRUE(id.ok());
    e.RunUntilIdle();
    return id.ok() ? *id : 0;
  };
  const uint64_t a = run(x1, 4);
  const uint64_t b = run(y, 4);
  EXPECT_EQ(cached[b], 0);  // the empty slot, not x1's for 2 shared rows
  std::vector<int32_t> x2 = x1;
  x2.insert(x2.end(), tokens[a].begin(), tokens[a].end());
  x2.push_back(21);
  const uint64_t c = run(x2, 2);
  EXPECT_EQ(cached[c], static_cast<int32_t>(x1.size() + 3));
  // Both slots hold a conversation now: a third one takes the least recently admitted slot
  // (y's) and still reuses the rows it shares with it.
  const uint64_t d = run({3, 1, 7, 7, 1, 1}, 2);
  EXPECT_EQ(cached[d], 4);
  // x's conversation kept its slot throughout.
  const uint64_t f = run(x2, 2);
  EXPECT_EQ(cached[f], static_cast<int32_t>(x2.size() - 1));
}

// A different image behind the same pad ids is never reused; the same image is.
// A prefix another slot holds (running or free) is copied into the slot a request is admitted
// to instead of being prefilled again: a system prompt shared by conversations.
TEST(PrefixReuseTest, APrefixAnotherSlotHoldsIsCopied) {
  auto lm = LoadModel("copy_prefix", 2, 64);
  ASSERT_TRUE(lm);
  std::vector<int32_t> system;
  for (int i = 0; i < 24; ++i) system.push_back(3 + (i * 11) % 60);
  auto with = [&](std::vector<int32_t> tail) {
    std::vector<int32_t> ids = system;
    ids.insert(ids.end(), tail.begin(), tail.end());
    return ids;
  };
  const GenerationRequest a = Text(with({40, 41}), 0, 10), b = Text(with({50, 51, 52}), 0, 4);
  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, int32_t> cached;
  EngineOptions o;
  BatchEngine e(
      *lm,
      [&](const TokenEvent& ev) {
        if (ev.token >= 0) got[ev.request_id].push_back(ev.token);
        cached[ev.request_id] = ev.cached_tokens;
        return true;
      },
      o);
  const uint64_t ia = e.Submit(a).value();
  e.Step();  // a runs in one slot, b goes to the other
  const uint64_t ib = e.Submit(b).value();
  e.RunUntilIdle();
  EXPECT_EQ(cached[ia], 0);
  EXPECT_EQ(cached[ib], 24);
  EXPECT_EQ(e.counters().copied_prefixes, 1u);
  EXPECT_EQ(got[ia], GreedyAlone(*lm, a));
  EXPECT_EQ(got[ib], GreedyAlone(*lm, b));
  // Without prefix reuse nothing is copied.
  o.prefix_reuse = false;
  BatchEngine plain(*lm, nullptr, o);
  (void)plain.Submit(a);
  plain.Step();
  (void)plain.Submit(b);
  plain.RunUntilIdle();
  EXPECT_EQ(plain.counters().copied_prefixes, 0u);
}

TEST(PrefixReuseTest, ADifferentImageBehindTheSamePadsIsNotReused) {
  auto lm = LoadModel("reuse_image", 1, 64);
  ASSERT_TRUE(lm);
  GenerationRequest a = BigImage(*lm, 1, true, 2, 3);
  GenerationRequest other_pixels = BigImage(*lm, 1, true, 2, 3);
  const int64_t H = lm->config().hidden;
  other_pixels.embeddings[static_cast<size_t>(5 * H)] += 0.5f;  // second visual row
  GenerationRequest other_features = BigImage(*lm, 1, true, 2, 3);
  {
    HostTensor pos = HostTensor::FromI32({4}, std::vector<int32_t>{4, 5, 6, 7});
    HostTensor feat(DType::kF32, {2, 4, H});
    std::copy_n(a.deepstack->features(0), feat.numel(), feat.f32());
    feat.f32()[4 * H + 2 * H] += 0.5f;  // level 1, third visual row
    HostTensor layers = HostTensor::FromI32({2}, std::vector<int32_t>{0, 1});
    other_features.deepstack =
        DeepStackPayload::Create(pos.view(), feat.view(), layers.view()).value();
  }
  const auto s = RunStreams(*lm, {a, other_pixels, other_features, a}, EngineOptions{});
  const int32_t S = static_cast<int32_t>(a.positions.length);
  EXPECT_EQ(s[0].cached, 0);
  EXPECT_EQ(s[1].cached, 5);  // rows before the changed visual row
  EXPECT_EQ(s[2].cached, 5);  // the slot held other_pixels, whose row 5 differs
  EXPECT_EQ(s[2].tokens.size(), 3u);
  EXPECT_EQ(s[3].cached, 6);  // the slot now holds other_features' rows
  const auto alone = RunStreams(*lm, {a}, EngineOptions{});
  EXPECT_EQ(s[3].tokens, alone[0].tokens);
  const auto twice = RunStreams(*lm, {a, a}, EngineOptions{});
  EXPECT_EQ(twice[1].cached, S - 1);
}

TEST(LogprobsTest, TheSampledTokenAndTheTopListComeFromTheLogSoftmax) {
  auto lm = LoadModel("logprobs", 1);
  ASSERT_TRUE(lm);
  GenerationRequest r = Text({1, 2, 3, 4}, 0, 3);
  r.logprobs = 5;
  std::vector<TokenEvent> events;
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    events.push_back(ev);
    return true;
  });
  ASSERT_TRUE(e.Submit(r).ok());
  e.RunUntilIdle();
  ASSERT_EQ(events.size(), 3u);
  for (const auto& ev : events) {
    ASSERT_EQ(ev.top_logprobs.size(), 5u);
    EXPECT_EQ(ev.top_logprobs[0].token, ev.token);  // greedy
    EXPECT_FLOAT_EQ(ev.top_logprobs[0].logprob, ev.logprob);
    EXPECT_LE(ev.logprob, 0.0f);
    for (size_t i = 1; i < 5; ++i) {
      EXPECT_LE(ev.top_logprobs[i].logprob, ev.top_logprobs[i - 1].logprob);
    }
  }
  r.logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(e.Submit(r).ok());
  r.logprobs = 0;
  r.sampling.logit_bias = {{lm->config().vocab, 1.0f}};
  EXPECT_FALSE(e.Submit(r).ok());
}

// The callback runs outside the step lock: it may submit and cancel, and a cancelled request
// emits nothing after its cancelled event.
TEST(CallbackTest, TheCallbackMaySubmitAndCancel) {
  auto lm = LoadModel("reentrant", 2);
  ASSERT_TRUE(lm);
  BatchEngine* engine = nullptr;
  std::map<uint64_t, std::vector<TokenEvent>> got;
  uint64_t first = 0, follow = 0;
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    got[ev.request_id].push_back(ev);
    if (ev.request_id == first && ev.token >= 0 && follow == 0) {
      follow = engine->Submit(Text({4, 5, 6}, 0, 2)).value();
      EXPECT_TRUE(engine->Cancel(first).ok());
      EXPECT_EQ(engine->Cancel(first).code(), StatusCode::kNotFound);
    }
    return true;
  });
  engine = &e;
  first = e.Submit(Text({1, 2, 3}, 0, 8)).value();
  e.RunUntilIdle();
  ASSERT_EQ(got[first].size(), 2u);
  EXPECT_EQ(got[first][1].finish, FinishReason::kCancelled);
  ASSERT_NE(follow, 0u);
  ASSERT_EQ(got[follow].size(), 2u);
  EXPECT_EQ(got[follow][1].finish, FinishReason::kLength);
}

// Submit and Cancel do not wait for a running step: a long unchunked prefill runs on the engine
// thread while another thread submits and cancels.
TEST(CallbackTest, SubmitAndCancelReturnWhileAStepRuns) {
  auto lm = LoadModel("nonblocking", 2, 1024);
  ASSERT_TRUE(lm);
  std::atomic<int> first_tokens{0};
  BatchEngine e(
      *lm,
      [&](const TokenEvent& ev) {
        if (ev.token >= 0 && ev.generated_tokens == 1) ++first_tokens;
        return true;
      },
      EngineOptions{.prefill_chunk = 0, .prefix_reuse = false});
  std::vector<int32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(1 + i % 50);
  e.Start();
  ASSERT_TRUE(e.Submit(Text(ids, 0, 2)).ok());
  // Wait until the step has taken the request (the queue is empty) but not finished it.
  for (int i = 0; i < 2000 && e.pending_count() > 0; ++i) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  auto id = e.Submit(Text({1, 2}, 0, 2));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(e.Cancel(*id).ok());
  const auto waited = std::chrono::steady_clock::now() - t0;
  const bool prefill_still_running = first_tokens.load() == 0;
  for (int i = 0; i < 4000 && !e.Idle(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  e.Stop();
  if (prefill_still_running) {
    EXPECT_LT(std::chrono::duration<double>(waited).count(), 0.05)
        << "Submit and Cancel waited for the running step";
  }
  EXPECT_TRUE(e.Idle());
}

}  // namespace
}  // namespace vls
