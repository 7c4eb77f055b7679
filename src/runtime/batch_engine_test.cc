#include "runtime/batch_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "base/paced_worker.h"
#include "runtime/batch_engine_test_util.h"

namespace vls {
namespace {

// docs/contracts.md §3: a batch with S=4 and deltas −1, +2, 0 decodes first at 3, 6, 4; cancelling
// the +2 request and admitting a 4-token text request into its slot gives 4.
TEST(BatchEngineTest, PinnedDeltaCoordinatesAndSlotReuse) {
  auto lm = LoadModel("pinned", 3);
  ASSERT_TRUE(lm);
  BatchEngine e(*lm);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  const uint64_t a = e.Submit(Text(ids, -1, 8)).value();
  const uint64_t b = e.Submit(Text(ids, 2, 8)).value();
  const uint64_t c = e.Submit(Text(ids, 0, 8)).value();
  e.AdmitPending();
  EXPECT_EQ(e.NextCoordinate(a).value(), (RopeCoord{3, 3, 3}));
  EXPECT_EQ(e.NextCoordinate(b).value(), (RopeCoord{6, 6, 6}));
  EXPECT_EQ(e.NextCoordinate(c).value(), (RopeCoord{4, 4, 4}));
  const int slot_b = e.SlotOf(b).value();
  ASSERT_TRUE(e.Cancel(b).ok());
  EXPECT_FALSE(e.NextCoordinate(b).has_value());
  const uint64_t d = e.Submit(Text(ids, 0, 8)).value();
  e.AdmitPending();
  EXPECT_EQ(e.SlotOf(d).value(), slot_b);
  EXPECT_EQ(e.NextCoordinate(d).value(), (RopeCoord{4, 4, 4}));
  EXPECT_EQ(e.Cancel(b).code(), StatusCode::kNotFound);
}

TEST(BatchEngineTest, RejectedSubmitChangesNothing) {
  auto lm = LoadModel("reject", 1);
  ASSERT_TRUE(lm);
  BatchEngine e(*lm);
  ASSERT_TRUE(e.Submit(Text({1, 2, 3}, 0, 4)).ok());
  const size_t count = e.pending_count(), bytes = e.pending_bytes();
  GenerationRequest wrong_mode = Image(*lm, 1, true, 4);
  wrong_mode.positions = SequentialPositions(PositionMode::k1D, wrong_mode.positions.length);
  auto s = e.Submit(std::move(wrong_mode));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(DeepStackRuleOf(s.status()), DeepStackRule::kPositionMode) << s.status().ToString();
  EXPECT_FALSE(e.Submit(Text({1, 2, 3}, 0, 30)).ok());  // prompt + max_new > C
  EXPECT_FALSE(e.Submit(Text({1, 2, 3}, -9, 4)).ok());  // negative first coordinate
  EXPECT_FALSE(e.Submit(Text({1, 2, 99999}, 0, 4)).ok());
  EXPECT_EQ(e.pending_count(), count);
  EXPECT_EQ(e.pending_bytes(), bytes);
}

TEST(BatchEngineTest, CancellingAQueuedDeepStackRequestFreesItsBuffers) {
  auto lm = LoadModel("cancel", 1);
  ASSERT_TRUE(lm);
  BatchEngine e(*lm);
  const size_t before = e.pending_bytes();
  GenerationRequest r = Image(*lm, 2, true, 4);
  const size_t feature_bytes = r.deepstack->bytes();
  const uint64_t id = e.Submit(std::move(r)).value();
  EXPECT_GE(e.pending_bytes(), before + feature_bytes);
  ASSERT_TRUE(e.Cancel(id).ok());
  EXPECT_EQ(e.pending_bytes(), before);
  EXPECT_EQ(e.pending_count(), 0u);
  // The only slot is free for a text request.
  const uint64_t t = e.Submit(Text({1, 2}, 0, 2)).value();
  e.AdmitPending();
  EXPECT_EQ(e.SlotOf(t).value(), 0);
}

// More requests than slots, of every kind; each stream equals the request run alone, and a
// cancelled request emits nothing after its cancel.
TEST(BatchEngineTest, MixedBatchMatchesSingleSequenceGreedy) {
  auto lm = LoadModel("parity", 3);
  ASSERT_TRUE(lm);
  std::vector<GenerationRequest> reqs;
  reqs.push_back(Text({1, 2, 3, 4}, 0, 6));
  reqs.push_back(Image(*lm, 1, false, 5));
  reqs.push_back(Image(*lm, 2, true, 7));
  reqs.push_back(Text({9, 8, 7}, -2, 4));
  reqs.push_back(Image(*lm, 3, true, 3));
  reqs.push_back(Text({5, 6, 7, 8, 9}, 3, 6));
  reqs.push_back(Image(*lm, 4, false, 6));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : reqs) alone.push_back(GreedyAlone(*lm, r));
  std::set<int32_t> distinct;
  for (const auto& a : alone) distinct.insert(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 3u) << "the test model should not repeat one token";

  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, FinishReason> finish;
  uint64_t cancel_id = 0;
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    if (ev.token >= 0) got[ev.request_id].push_back(ev.token);
    if (ev.finish != FinishReason::kNone) finish[ev.request_id] = ev.finish;
    return !(ev.request_id == cancel_id && got[ev.request_id].size() >= 2);
  });
  std::vector<uint64_t> ids;
  for (auto& r : reqs) ids.push_back(e.Submit(r).value());
  cancel_id = ids[5];
  e.RunUntilIdle();
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (ids[i] == cancel_id) {
      EXPECT_EQ(finish[ids[i]], FinishReason::kCancelled);
      EXPECT_EQ(got[ids[i]], std::vector<int32_t>(alone[i].begin(), alone[i].begin() + 2));
      continue;
    }
    EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i;
    EXPECT_EQ(finish[ids[i]], FinishReason::kLength);
  }
  EXPECT_TRUE(e.Idle());
}

// The fast paths keep each row's result independent of the batch: BF16 blocked and Q8 products
// compute every row the same way at any row count, and their per-call input transforms (BF16
// rounding, Q8 quantization) run inside the product's parallel loop (kernels/dispatch.cc
// RowPrologue), which the ThreadSanitizer build checks through this test.
TEST(BatchEngineTest, BatchedDecodeMatchesSingleSequenceAtBf16AndInt8) {
  for (const auto precision : {kernels::Precision::kBF16, kernels::Precision::kInt8}) {
    SCOPED_TRACE(kernels::PrecisionName(precision));
    auto lm = LoadModel(std::string("fast_") + kernels::PrecisionName(precision), 3, 32, precision);
    ASSERT_TRUE(lm);
    std::vector<GenerationRequest> reqs;
    reqs.push_back(Text({1, 2, 3, 4}, 0, 6));
    reqs.push_back(Image(*lm, 1, true, 5));
    reqs.push_back(Text({9, 8, 7}, -2, 7));
    reqs.push_back(Image(*lm, 2, false, 4));
    std::vector<std::vector<int32_t>> alone;
    for (const auto& r : reqs) alone.push_back(GreedyAlone(*lm, r));
    std::map<uint64_t, std::vector<int32_t>> got;
    BatchEngine e(*lm, [&](const TokenEvent& ev) {
      if (ev.token >= 0) got[ev.request_id].push_back(ev.token);
      return true;
    });
    std::vector<uint64_t> ids;
    for (auto& r : reqs) ids.push_back(e.Submit(r).value());
    e.RunUntilIdle();
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i;
  }
}

// The model is made to emit EOS (a logit bias on the config's first EOS id), so the test
// exercises the rule rather than depending on what a random model predicts.
TEST(BatchEngineTest, EosStopsAndWinsOverLength) {
  auto lm = LoadModel("eos", 1);
  ASSERT_TRUE(lm);
  ASSERT_FALSE(lm->config().eos_token_ids.empty());
  const int32_t eos = lm->config().eos_token_ids[0];
  GenerationRequest r = Text({1, 2, 3}, 0, 1);
  r.sampling.logit_bias = {{eos, 1e4f}};
  r.ignore_eos = false;
  BatchEngine e(*lm);
  ASSERT_TRUE(e.Submit(r).ok());
  auto events = e.Step();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].token, eos);
  EXPECT_EQ(events[0].finish, FinishReason::kStop);  // at the length limit too: EOS wins
  // ignore_eos: the same forced EOS tokens run to the length limit.
  r.ignore_eos = true;
  r.max_new_tokens = 3;
  ASSERT_TRUE(e.Submit(r).ok());
  std::vector<TokenEvent> all;
  while (!e.Idle()) {
    for (auto& ev : e.Step()) all.push_back(ev);
  }
  ASSERT_EQ(all.size(), 3u);
  for (const auto& ev : all) EXPECT_EQ(ev.token, eos);
  EXPECT_EQ(all.back().finish, FinishReason::kLength);
  // A stop token id finishes with "stop" although EOS is ignored.
  const int32_t other = eos == 5 ? 6 : 5;
  r.sampling.logit_bias = {{other, 1e4f}};
  r.stop_token_ids = {other};
  ASSERT_TRUE(e.Submit(r).ok());
  events = e.Step();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].token, other);
  EXPECT_EQ(events[0].finish, FinishReason::kStop);
}

// Submit and cancel from several threads while the engine runs on its own thread; every
// request ends with exactly one finish event. Run under ThreadSanitizer by scripts/test.sh.
TEST(BatchEngineTest, ConcurrentSubmitAndCancelStress) {
  auto lm = LoadModel("stress", 2);
  ASSERT_TRUE(lm);
  std::mutex mu;
  std::map<uint64_t, int> finishes;
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    if (ev.finish != FinishReason::kNone) {
      std::lock_guard<std::mutex> lock(mu);
      ++finishes[ev.request_id];
    }
    return true;
  });
  e.Start();
  std::atomic<int> submitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < 8; ++i) {
        auto id = e.Submit(Text({1 + t, 2, 3}, t - 1, 1 + static_cast<int>(rng() % 4)));
        ASSERT_TRUE(id.ok());
        ++submitted;
        if (rng() % 2) (void)e.Cancel(*id);  // may already be finished: NotFound is fine
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 2000 && !e.Idle(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  e.Stop();
  EXPECT_TRUE(e.Idle());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(static_cast<int>(finishes.size()), submitted.load());
  for (const auto& [id, n] : finishes) EXPECT_EQ(n, 1) << id;
}

// The engine's thread is the foreground of the model's pacer (ADR 0030): background work on the
// model's pool (the image encoder's worker) runs between its steps while a stream decodes, runs
// freely once the engine is idle, and is not left waiting when the engine stops.
TEST(BatchEngineTest, BackgroundWorkRunsBetweenStepsAndIsNeverLeftWaiting) {
  auto lm = LoadModel("paced", 2, 2048);
  ASSERT_TRUE(lm);
  std::atomic<int> tokens{0};
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    if (ev.token >= 0) tokens.fetch_add(1);
    return true;
  });
  e.Start();
  ThreadPool& pool = lm->model().context().pool();
  PacedWorker worker(lm->pacer());
  // Loops of about a millisecond each, on the model's pool.
  const auto loop = [&] {
    pool.ParallelFor(2, 1, [](int64_t, int64_t) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
  };
  const auto id = e.Submit(Text({1, 2, 3}, 0, 1500));
  ASSERT_TRUE(id.ok());
  while (tokens.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<int> seen;  // the stream's tokens when each loop ended
  ASSERT_TRUE(worker
                  .Run([&] {
                    for (int i = 0; i < 30; ++i) {
                      loop();
                      seen.push_back(tokens.load());
                    }
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_EQ(seen.size(), 30u);
  // Steps ran between the loops: the stream kept going while the job ran.
  int advanced = 0;
  for (size_t i = 1; i < seen.size(); ++i) advanced += seen[i] > seen[i - 1] ? 1 : 0;
  EXPECT_GE(advanced, 10) << "the stream hardly moved while the background job ran";
  EXPECT_GT(lm->pacer().stats().waited_seconds, 0.0);
  // A job still running when the engine stops finishes.
  std::thread job([&] {
    EXPECT_TRUE(worker
                    .Run([&] {
                      for (int i = 0; i < 200; ++i) loop();
                      return Status::Ok();
                    })
                    .ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  e.Stop();
  job.join();
  // Once the engine has nothing to run, a job does not wait for windows.
  e.Start();
  (void)e.Cancel(*id);  // NotFound when it finished meanwhile
  for (int i = 0; i < 5000 && !e.Idle(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(e.Idle());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the engine thread goes idle
  const double waited = lm->pacer().stats().waited_seconds;
  ASSERT_TRUE(worker
                  .Run([&] {
                    for (int i = 0; i < 20; ++i) loop();
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_LT(lm->pacer().stats().waited_seconds - waited, 0.005);
  e.Stop();
}

// Fault injection (EngineOptions::fault_hook_for_testing): whatever one request's admission,
// prefill or sampling throws finishes that request with an error event (valid UTF-8, naming
// the failure) and the others still get exactly their greedy tokens; the engine keeps serving.
TEST(BatchEngineTest, AThrowInOneRequestFailsOnlyThatRequest) {
  auto lm = LoadModel("faults", 3);
  ASSERT_TRUE(lm);
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7}, {8, 9}};
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(GreedyAlone(*lm, Text(p, 0, 4)));
  struct Case {
    const char* point;
    bool bad_alloc;
    const char* needle;
  };
  for (const Case& c : {Case{"admit", false, "admission failed: injected"},
                        Case{"prefill", true, "prefill: out of memory"},
                        Case{"sample", false, "sampling failed: injected"}}) {
    for (bool threaded : {false, true}) {
      SCOPED_TRACE(std::string(c.point) + (threaded ? " threaded" : " stepped"));
      // Ids count from 1 per engine: the second request is the victim. Atomic: the engine
      // thread reads it.
      std::atomic<uint64_t> victim{2};
      std::atomic<int> samples{0};
      EngineOptions eo;
      eo.fault_hook_for_testing = [&](std::string_view point, uint64_t id) {
        // The victim fails at its second sample (mid-decode), else at the first hit.
        if (point != c.point || id != victim) return;
        if (point == "sample" && ++samples < 2) return;
        if (c.bad_alloc) throw std::bad_alloc();
        throw std::runtime_error("injected \xff fault");  // not valid UTF-8
      };
      BatchEngine e(*lm, nullptr, eo);
      if (threaded) e.Start();
      std::vector<uint64_t> ids;
      for (const auto& p : prompts) ids.push_back(e.Submit(Text(p, 0, 4)).value());
      ASSERT_EQ(ids[1], victim.load());
      std::map<uint64_t, std::vector<int32_t>> tokens;
      std::map<uint64_t, TokenEvent> last;
      auto take = [&](const std::vector<TokenEvent>& events) {
        for (const TokenEvent& ev : events) {
          if (ev.token >= 0) tokens[ev.request_id].push_back(ev.token);
          if (ev.finish != FinishReason::kNone) last[ev.request_id] = ev;
        }
      };
      for (int i = 0; i < 200 && last.size() < ids.size(); ++i) {
        take(threaded ? e.WaitEvents(100) : e.Step());
      }
      ASSERT_EQ(last.size(), ids.size());
      const TokenEvent& failed = last[ids[1]];
      EXPECT_EQ(failed.finish, FinishReason::kError);
      EXPECT_NE(failed.error.find(c.needle), std::string::npos) << failed.error;
      if (!c.bad_alloc) {
        EXPECT_NE(failed.error.find("\xEF\xBF\xBD"), std::string::npos)
            << "the invalid byte is replaced by U+FFFD: " << failed.error;
      }
      for (size_t i : {size_t{0}, size_t{2}}) {
        EXPECT_EQ(last[ids[i]].finish, FinishReason::kLength);
        EXPECT_EQ(tokens[ids[i]], alone[i]) << "request " << i;
      }
      // Still serving: a request after the failure completes.
      victim = 0;
      const uint64_t after = e.Submit(Text(prompts[0], 0, 4)).value();
      last.clear();
      tokens.clear();
      for (int i = 0; i < 200 && last.count(after) == 0; ++i) {
        take(threaded ? e.WaitEvents(100) : e.Step());
      }
      EXPECT_EQ(last[after].finish, FinishReason::kLength);
      EXPECT_EQ(tokens[after], alone[0]);
      e.Stop();
    }
  }
}

TEST(BatchEngineTest, CreateReturnsTheEngine) {
  auto lm = LoadModel("create", 2);
  ASSERT_TRUE(lm);
  auto e = BatchEngine::Create(*lm);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const uint64_t id = (*e)->Submit(Text({1, 2}, 0, 2)).value();
  (*e)->RunUntilIdle();
  EXPECT_FALSE((*e)->SlotOf(id).has_value());
}

// Sizes are checked before anything is allocated: past the documented maxima an
// InvalidArgument, within them but beyond memory a ResourceExhausted naming both figures.
TEST(BatchEngineTest, BoundsBeyondTheMaximaOrMemoryAreRefusedAtLoad) {
  auto lm = LoadModel("bounds", 1);  // writes the model folder
  ASSERT_TRUE(lm);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = JoinPath(tmp ? tmp : "/tmp", "vls_batch_test_bounds");
  auto load = [&](int capacity, int slots, int threads) {
    LoadOptions o;
    o.capacity = capacity;
    o.slots = slots;
    o.threads = threads;
    return LoadedModel::Load(dir, o).status();
  };
  Status s = load(kMaxCapacity + 1, 1, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("capacity 16777217 is outside [1, 16777216]"), std::string::npos)
      << s.message();
  s = load(64, kMaxSlots + 1, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slots 4097 is outside [1, 4096]"), std::string::npos);
  s = load(64, 1, kMaxThreads + 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("threads 1025 is outside [0, 1024]"), std::string::npos);
  s = load(kMaxCapacity, kMaxSlots, 2);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("capacity 16777216 with 4096 slot(s) needs"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("of memory but"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("lower the capacity or the slots"), std::string::npos);
}

}  // namespace
}  // namespace vls
