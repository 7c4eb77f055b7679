#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace vls
