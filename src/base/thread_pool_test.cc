#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
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

// Waits (spinning, bounded) until `flag` is set; false after about ten seconds.
bool WaitFor(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Every index of a plain loop runs exactly once (the pool is usable).
void ExpectNormalLoop(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
}

// Participant 1 stalls in its first chunk until every other index is done: the others must take
// the rest of its share (a share is not left to its owner), and only then does it return.
TEST(ThreadPoolTest, AStalledParticipantsShareIsTakenByTheOthers) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    for (int r = 0; r < 20; ++r) {
      constexpr int64_t kN = 4096;
      std::vector<std::atomic<int>> hits(kN);
      std::atomic<int64_t> done{0};
      std::atomic<bool> stalled{false};
      pool.ParallelFor(kN, 1, [&](int64_t b, int64_t e, int t) {
        if (t == 1 && !stalled.exchange(true)) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (done.load() < kN - (e - b)) {
            if (std::chrono::steady_clock::now() > deadline) {
              ADD_FAILURE() << "the others left " << kN - (e - b) - done.load()
                            << " indices of the stalled participant's share";
              break;
            }
            std::this_thread::yield();
          }
        }
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        done.fetch_add(e - b);
      });
      for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Each participant walks few contiguous runs (its share front to back, then the halves it
// takes from others), not chunks scattered over the range: a weight stream restarts at each
// jump. Two participants over 4096 indices, each index a little work.
TEST(ThreadPoolTest, ParticipantsWalkFewContiguousRuns) {
  ThreadPool pool(2);
  for (int r = 0; r < 20; ++r) {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> chunks(2);
    std::atomic<int64_t> sink{0};
    pool.ParallelFor(4096, 1, [&](int64_t b, int64_t e, int t) {
      chunks[static_cast<size_t>(t)].emplace_back(b, e);
      int64_t s = 0;
      for (int64_t i = b * 64; i < e * 64; ++i) s += i * i;
      sink.fetch_add(s);
    });
    int64_t covered = 0;
    for (const auto& own : chunks) {
      int runs = 0;
      for (size_t i = 0; i < own.size(); ++i) {
        if (i == 0 || own[i].first != own[i - 1].second) ++runs;
        covered += own[i].second - own[i].first;
      }
      // 1 run of its own share, then at most about log2(4096 / 64) halves taken from the other.
      EXPECT_LE(runs, 12) << "chunks: " << own.size();
    }
    EXPECT_EQ(covered, 4096);
  }
}

// A count beyond 32 bits runs in units of several indices: the chunks still cover [0, n) exactly.
TEST(ThreadPoolTest, CountsBeyond32BitsAreCoveredExactly) {
  ThreadPool pool(3);
  const int64_t n = (int64_t{1} << 33) + 5;
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  pool.ParallelFor(n, int64_t{1} << 28, [&](int64_t b, int64_t e) {
    const std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
  });
  std::sort(chunks.begin(), chunks.end());
  int64_t at = 0;
  for (const auto& [b, e] : chunks) {
    ASSERT_EQ(b, at);
    ASSERT_GT(e, b);
    at = e;
  }
  EXPECT_EQ(at, n);
}

TEST(ThreadPoolTest, ChunksAreToldTheirParticipantAndNoTwoRunAsOne) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> busy(static_cast<size_t>(threads));
    std::atomic<bool> bad{false};
    for (int r = 0; r < 200; ++r) {
      pool.ParallelFor(64, 1, [&](int64_t, int64_t, int t) {
        if (t < 0 || t >= threads) {
          bad = true;
          return;
        }
        if (busy[static_cast<size_t>(t)].fetch_add(1) != 0) bad = true;
        std::this_thread::yield();
        busy[static_cast<size_t>(t)].fetch_sub(1);
      });
    }
    EXPECT_FALSE(bad.load()) << threads << " threads";
    // The caller is participant 0 of an inline loop too.
    int seen = -1;
    pool.ParallelFor(1, 1, [&](int64_t, int64_t, int t) { seen = t; });
    EXPECT_EQ(seen, 0);
  }
}

TEST(ThreadPoolTest, NestedLoopsAndLeasesRunAsTheBodysParticipant) {
  ThreadPool pool(4);
  std::atomic<bool> bad{false};
  pool.ParallelFor(64, 1, [&](int64_t, int64_t, int t) {
    pool.ParallelFor(10, 1, [&](int64_t, int64_t, int inner) {
      if (inner != t) bad = true;
    });
    const ThreadPool::Lease lease(pool);
    if (lease.thread() != t) bad = true;
  });
  EXPECT_FALSE(bad.load());
  const ThreadPool::Lease outer(pool);
  EXPECT_EQ(outer.thread(), 0);
  const ThreadPool::Lease nested(pool);  // does not wait for the outer lease
  EXPECT_EQ(nested.thread(), 0);
  ExpectNormalLoop(pool, 1000);  // runs while this thread holds the pool
}

TEST(ThreadPoolTest, ParticipantZeroIsNeverSharedByConcurrentCallers) {
  // Loops (inline and parallel) and leases from three threads: participant 0's state is only
  // ever touched by one of them at a time.
  ThreadPool pool(3);
  std::atomic<int> zero_busy{0};
  std::atomic<bool> bad{false};
  auto use_zero = [&] {
    if (zero_busy.fetch_add(1) != 0) bad = true;
    std::this_thread::yield();
    zero_busy.fetch_sub(1);
  };
  auto caller = [&](int seed) {
    for (int r = 0; r < 300; ++r) {
      if ((r + seed) % 3 == 0) {
        const ThreadPool::Lease lease(pool);
        use_zero();
        pool.ParallelFor(16, 1, [&](int64_t, int64_t, int t) {
          if (t == 0) use_zero();
        });
        use_zero();
      } else {
        const int64_t n = (r + seed) % 3 == 1 ? 1 : 32;  // inline or parallel
        pool.ParallelFor(n, 1, [&](int64_t, int64_t, int t) {
          if (t == 0) use_zero();
        });
      }
    }
  };
  std::thread a(caller, 0), b(caller, 1);
  caller(2);
  a.join();
  b.join();
  EXPECT_FALSE(bad.load());
}

TEST(ThreadPoolTest, ExceptionOnAWorkerReachesTheCallerAndThePoolStaysUsable) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    for (int r = 0; r < 100; ++r) {
      std::atomic<bool> worker_started{false};
      std::atomic<int> running{0};
      try {
        pool.ParallelFor(256, 1, [&](int64_t, int64_t, int t) {
          running.fetch_add(1);
          if (t == 0) {
            // The caller's chunk waits for a worker, so the throw is on a worker every time.
            if (!WaitFor(worker_started)) ADD_FAILURE() << "no worker joined the loop";
          } else if (!worker_started.exchange(true)) {
            running.fetch_sub(1);
            throw std::runtime_error("worker " + std::to_string(t));
          }
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          running.fetch_sub(1);
        });
        ADD_FAILURE() << "no exception";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("worker ", 0), 0u) << e.what();
        // Every chunk that started had finished before ParallelFor threw.
        EXPECT_EQ(running.load(), 0);
      }
      ExpectNormalLoop(pool, 1000);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(ThreadPoolTest, ExceptionOnTheCallerWaitsForTheWorkersAndThePoolStaysUsable) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int r = 0; r < 100; ++r) {
      std::atomic<bool> caller_started{false};
      std::atomic<int> running{0};
      try {
        pool.ParallelFor(64, 1, [&](int64_t, int64_t, int t) {
          running.fetch_add(1);
          if (t == 0) {
            caller_started = true;
            running.fetch_sub(1);
            throw std::logic_error("caller");
          }
          // Workers hold their first chunk until the caller has one (so it always gets one).
          if (!WaitFor(caller_started)) ADD_FAILURE() << "the caller took no chunk";
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          running.fetch_sub(1);
        });
        ADD_FAILURE() << "no exception";
      } catch (const std::logic_error& e) {
        EXPECT_STREQ(e.what(), "caller");
        EXPECT_EQ(running.load(), 0);
      }
      ExpectNormalLoop(pool, 1000);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(ThreadPoolTest, EveryChunkThrowingGivesOneExceptionAndNoTerminate) {
  ThreadPool pool(4);
  for (int r = 0; r < 300; ++r) {
    EXPECT_THROW(pool.ParallelFor(
                     100, 1, [&](int64_t, int64_t) { throw std::runtime_error("every chunk"); }),
                 std::runtime_error);
    ExpectNormalLoop(pool, 100);
  }
}

TEST(ThreadPoolTest, ExceptionsOfInlineNestedAndExclusiveRunsPropagate) {
  ThreadPool pool(3);
  // Inline (n <= grain).
  EXPECT_THROW(pool.ParallelFor(4, 8, [](int64_t, int64_t) { throw std::runtime_error("x"); }),
               std::runtime_error);
  // Nested: the inner loop's exception leaves the outer body, and the outer loop rethrows it.
  EXPECT_THROW(pool.ParallelFor(16, 1,
                                [&](int64_t b, int64_t) {
                                  pool.ParallelFor(4, 1, [&](int64_t, int64_t) {
                                    if (b == 0) throw std::out_of_range("inner");
                                  });
                                }),
               std::out_of_range);
  // RunExclusive releases the pool when fn throws.
  EXPECT_THROW(pool.RunExclusive([] { throw std::runtime_error("exclusive"); }),
               std::runtime_error);
  std::thread other([&] { ExpectNormalLoop(pool, 500); });
  other.join();
  ExpectNormalLoop(pool, 500);
}

TEST(ThreadPoolTest, CountsOutsideTheBoundAreRefused) {
  for (int threads : {-1, kMaxThreads + 1, 100000}) {
    auto pool = ThreadPool::Create(threads);
    ASSERT_FALSE(pool.ok()) << threads;
    EXPECT_EQ(pool.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(pool.status().message().find("threads: " + std::to_string(threads) + " is outside"),
              std::string::npos)
        << pool.status().message();
  }
  EXPECT_THROW(ThreadPool(kMaxThreads + 1), std::invalid_argument);
  auto ok = ThreadPool::Create(3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->threads(), 3);
}

// A thread the system refuses (simulated: the starter throws as std::thread does under a low
// ulimit -u) fails the creation cleanly: an error naming the thread, and the workers already
// started are stopped and joined (none keeps running, nothing terminates or deadlocks).
TEST(ThreadPoolTest, AThreadThatCannotStartFailsCreationCleanly) {
  std::atomic<int> started{0}, running{0};
  const ThreadStarter refuse_fifth = [&](std::function<void()> body) {
    if (started.load() == 4) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "pthread_create");
    }
    ++started;
    return std::thread([&running, body = std::move(body)] {
      ++running;
      body();
      --running;
    });
  };
  auto pool = ThreadPool::Create(8, refuse_fifth);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(pool.status().message().find("cannot start kernel thread 6 of 8 (5 running)"),
            std::string::npos)
      << pool.status().message();
  EXPECT_EQ(started.load(), 4);
  EXPECT_EQ(running.load(), 0);  // every started worker has returned and been joined
  // The constructor reports the same by throwing, with the same cleanup.
  started = 0;
  EXPECT_THROW(ThreadPool(8, refuse_fifth), std::system_error);
  EXPECT_EQ(running.load(), 0);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// The real thing in a child process: under a 256 MiB address-space limit, kMaxThreads stacks do
// not fit; creation returns ResourceExhausted instead of aborting.
TEST(ThreadPoolTest, ThreadsBeyondTheAddressSpaceLimitAreAnError) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = rlim_t{256} << 20;
    if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(3);
    auto pool = ThreadPool::Create(kMaxThreads);
    ::_exit(!pool.ok() && pool.status().code() == StatusCode::kResourceExhausted ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif

}  // namespace
}  // namespace vls
