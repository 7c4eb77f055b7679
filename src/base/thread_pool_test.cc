#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace vls {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{12345}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(ThreadPoolTest, ZeroMeansHardwareThreads) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.threads(), ThreadPool::HardwareThreads());
}

TEST(ThreadPoolTest, NestedLoopRunsInlineWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(10, 1, [&](int64_t b2, int64_t e2) { sum.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(sum.load(), 40);
}

TEST(ThreadPoolTest, ManyShortLoops) {
  ThreadPool pool(2);
  int64_t total = 0;
  for (int r = 0; r < 2000; ++r) {
    std::atomic<int64_t> s{0};
    pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) { s.fetch_add(e - b); });
    total += s.load();
  }
  EXPECT_EQ(total, 2000 * 64);
}

TEST(ThreadPoolTest, SleepingWorkersAndSlowChunksStillRunEveryIndexOnce) {
  // Pauses between loops outlast the workers' spin (they sleep on the condition variable), and
  // chunks that sleep outlast the caller's spin (it sleeps until the last worker leaves).
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    for (int r = 0; r < 6; ++r) {
      std::vector<std::atomic<int>> hits(32);
      pool.ParallelFor(32, 1, [&](int64_t b, int64_t e) {
        if (r % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
      if (r % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

TEST(ThreadPoolTest, RunExclusiveRunsOnCallerAndExcludesLoops) {
  ThreadPool pool(2);
  std::atomic<bool> inside{false};
  std::atomic<bool> overlapped{false};
  std::thread other([&] {
    for (int r = 0; r < 200; ++r) {
      pool.ParallelFor(8, 1, [&](int64_t, int64_t) {
        if (inside.load()) overlapped = true;
      });
    }
  });
  for (int r = 0; r < 200; ++r) {
    const std::thread::id caller = std::this_thread::get_id();
    pool.RunExclusive([&] {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      inside = true;
      std::this_thread::yield();
      inside = false;
    });
  }
  other.join();
  EXPECT_FALSE(overlapped.load()) << "a loop body ran while RunExclusive held the pool";
  // From inside a loop body it runs directly instead of deadlocking.
  std::atomic<int> ran{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.RunExclusive([&] { ran.fetch_add(1); });
  });
  EXPECT_EQ(ran.load(), 4);
}

}  // namespace
}  // namespace vls
