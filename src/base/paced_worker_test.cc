#include "base/paced_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/pool_pacer.h"
#include "base/thread_pool.h"

namespace vls {
namespace {

TEST(PacedWorkerTest, JobsRunOnOneWorkerThreadNotTheCallers) {
  PoolPacer pacer;
  PacedWorker worker(pacer);
  std::vector<std::thread::id> ran(4);
  std::vector<std::thread> callers;
  std::vector<Status> results(4);
  for (size_t i = 0; i < 4; ++i) {
    callers.emplace_back([&, i] {
      results[i] = worker.Run([&, i] {
        ran[i] = std::this_thread::get_id();
        return i == 2 ? InvalidArgument("job 2 says no") : Status::Ok();
      });
      EXPECT_NE(ran[i], std::this_thread::get_id());
    });
  }
  for (std::thread& t : callers) t.join();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(ran[i], ran[0]) << i;
    EXPECT_EQ(results[i].ok(), i != 2) << i;
  }
  EXPECT_EQ(results[2].message(), "job 2 says no");
  EXPECT_EQ(worker.stats().jobs, 4u);
}

TEST(PacedWorkerTest, AWaitingJobIsDroppedWhenItsCallerCancels) {
  PoolPacer pacer;
  PacedWorker worker(pacer);
  std::atomic<bool> release{false}, first_started{false}, second_ran{false};
  std::thread first([&] {
    EXPECT_TRUE(worker
                    .Run([&] {
                      first_started = true;
                      while (!release.load())
                        std::this_thread::sleep_for(std::chrono::milliseconds(1));
                      return Status::Ok();
                    })
                    .ok());
  });
  while (!first_started.load()) std::this_thread::yield();
  std::atomic<bool> gone{false};
  std::thread second([&] {
    const Status s = worker.Run(
        [&] {
          second_ran = true;
          return Status::Ok();
        },
        [&] { return gone.load(); });
    EXPECT_EQ(s.code(), StatusCode::kCancelled);
    EXPECT_NE(s.message().find("image encoder"), std::string::npos) << s.message();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  gone = true;
  second.join();  // returns while the first job still runs
  release = true;
  first.join();
  EXPECT_FALSE(second_ran.load());
  EXPECT_EQ(worker.stats().jobs, 1u);
}

TEST(PacedWorkerTest, JobsAreBackgroundWorkOfThePacer) {
  ThreadPool pool(2);
  PoolPacer pacer;
  PacedWorker worker(pacer);
  PoolPacer::Foreground fg(pacer);
  fg.BeginStep();
  std::atomic<bool> looped{false};
  std::thread caller([&] {
    EXPECT_TRUE(worker
                    .Run([&] {
                      pool.ParallelFor(64, 1, [&](int64_t, int64_t) { looped = true; });
                      return Status::Ok();
                    })
                    .ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(looped.load()) << "the job's loop ran inside a foreground step";
  fg.EndStep();
  caller.join();
  EXPECT_TRUE(looped.load());
  EXPECT_EQ(pacer.stats().units, 1u);
}

TEST(PacedWorkerTest, AJobThatRunsAJobRunsItInline) {
  PoolPacer pacer;
  PacedWorker worker(pacer);
  std::thread::id outer, inner;
  const Status s = worker.Run([&] {
    outer = std::this_thread::get_id();
    return worker.Run([&] {
      inner = std::this_thread::get_id();
      return Status::Ok();
    });
  });
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(outer, inner);
}

TEST(PacedWorkerTest, AThrowingJobBecomesAnErrorAndTheWorkerGoesOn) {
  PoolPacer pacer;
  PacedWorker worker(pacer);
  const Status s = worker.Run([]() -> Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
  EXPECT_TRUE(worker.Run([] { return Status::Ok(); }).ok());
}

}  // namespace
}  // namespace vls
