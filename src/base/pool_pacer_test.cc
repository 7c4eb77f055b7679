#include "base/pool_pacer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "base/thread_pool.h"

namespace vls {
namespace {

using std::chrono::milliseconds;

// Long enough for a thread that is not blocked to have got past the point under test, even on
// a loaded machine; a blocked one never gets there, so a pass never depends on it.
constexpr milliseconds kSettle{100};

TEST(PoolPacerTest, ShareOutsideItsRangeIsRefused) {
  PoolPacer pacer;
  EXPECT_DOUBLE_EQ(pacer.share(), kDefaultPacerShare);
  for (double bad : {0.0, -1.0, kMaxPacerShare * 2, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    const Status s = pacer.SetShare(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("background share"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(pacer.SetShare(0.25).ok());
  EXPECT_DOUBLE_EQ(pacer.share(), 0.25);
}

TEST(PoolPacerTest, AStepWaitsForTheRunningUnit) {
  PoolPacer pacer;
  PoolPacer::Foreground fg(pacer);
  std::atomic<bool> stepping{false};
  std::thread step;
  {
    const PoolPacer::Unit unit(pacer);
    step = std::thread([&] {
      fg.BeginStep();
      stepping = true;
    });
    std::this_thread::sleep_for(kSettle);
    EXPECT_FALSE(stepping.load()) << "a step began while a background unit ran";
  }
  step.join();
  EXPECT_TRUE(stepping.load());
  fg.EndStep();
}

TEST(PoolPacerTest, AUnitWaitsForTheStepAndThenItsWindow) {
  PoolPacer pacer;
  PoolPacer::Foreground fg(pacer);
  fg.BeginStep();
  std::atomic<int> units{0};
  std::thread background([&] {
    const PoolPacer::Background scope(pacer);
    const PoolPacer::Unit unit(pacer);
    units.fetch_add(1);
  });
  std::this_thread::sleep_for(kSettle);
  EXPECT_EQ(units.load(), 0) << "a unit ran inside a foreground step";
  fg.EndStep();  // a step of kSettle opens a window of half of it
  background.join();
  EXPECT_EQ(units.load(), 1);
}

TEST(PoolPacerTest, AClosedWindowHoldsUnitsUntilTheForegroundIdles) {
  PoolPacer pacer;
  PoolPacer::Foreground fg(pacer);
  fg.BeginStep();
  fg.EndStep();  // a step of next to nothing: its window is over at once
  std::this_thread::sleep_for(milliseconds(5));
  std::atomic<bool> ran{false};
  std::thread background([&] {
    const PoolPacer::Unit unit(pacer);
    ran = true;
  });
  std::this_thread::sleep_for(kSettle);
  EXPECT_FALSE(ran.load()) << "a unit ran outside its window while the foreground was busy";
  fg.Idle();
  background.join();
  EXPECT_TRUE(ran.load());
}

TEST(PoolPacerTest, WithoutBackgroundWorkStepsDoNotWait) {
  PoolPacer pacer;
  PoolPacer::Foreground fg(pacer);
  using Seconds = std::chrono::duration<double>;
  const auto t0 = std::chrono::steady_clock::now();
  Seconds stepped{0};
  for (int i = 0; i < 100; ++i) {
    fg.BeginStep();
    const auto s0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(milliseconds(1));
    stepped += std::chrono::steady_clock::now() - s0;
    fg.EndStep();
  }
  // Waiting out a window of half of each step would take 1.5× the steps' time.
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - t0).count(), 1.25 * stepped.count());
}

// A foreground stepping for `step` at a time beside a background of `unit`-long units, for
// `steps` steps: the background's share of the time, as the pacer's stats count it.
double BackgroundShare(double share, milliseconds step, milliseconds unit, int steps) {
  PoolPacer pacer;
  EXPECT_TRUE(pacer.SetShare(share).ok());
  std::atomic<bool> stop{false};
  std::thread background([&] {
    const PoolPacer::Background scope(pacer);
    while (!stop.load()) {
      const PoolPacer::Unit u(pacer);
      std::this_thread::sleep_for(unit);
    }
  });
  std::this_thread::sleep_for(milliseconds(20));  // it runs freely until the first step
  const double before = pacer.stats().unit_seconds;
  double stepped = 0;
  {
    PoolPacer::Foreground fg(pacer);
    for (int i = 0; i < steps; ++i) {
      fg.BeginStep();
      const auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(step);
      stepped += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fg.EndStep();
    }
    // What ran before the foreground idles and lets the background loose.
    const double ran = pacer.stats().unit_seconds - before;
    fg.Idle();
    stop = true;
    background.join();
    return ran / stepped;
  }
}

TEST(PoolPacerTest, TheBackgroundGetsItsShareAndNoMore) {
  // Short units fill their windows: the background runs about share × the steps' time.
  const double half = BackgroundShare(0.5, milliseconds(20), milliseconds(2), 40);
  EXPECT_GT(half, 0.3);
  EXPECT_LT(half, 0.6);
  // Units 3× the window: each one overruns, and the windows after it pay that back.
  const double long_units = BackgroundShare(0.5, milliseconds(10), milliseconds(15), 60);
  EXPECT_LT(long_units, 0.75);  // one 15 ms unit per 10 ms step would be 1.5
  EXPECT_GT(long_units, 0.2);
}

TEST(PoolPacerTest, PoolLoopsOfABackgroundThreadAreUnits) {
  ThreadPool pool(2);
  PoolPacer pacer;
  std::thread background([&] {
    const PoolPacer::Background scope(pacer);
    for (int i = 0; i < 3; ++i) pool.ParallelFor(64, 1, [](int64_t, int64_t) {});
    {
      // A unit around loops makes them one unit, nested loops included.
      const PoolPacer::Unit unit(pacer);
      pool.ParallelFor(64, 1,
                       [&](int64_t, int64_t) { pool.ParallelFor(4, 1, [](int64_t, int64_t) {}); });
      pool.ParallelFor(64, 1, [](int64_t, int64_t) {});
    }
  });
  background.join();
  EXPECT_EQ(pacer.stats().units, 4u);
  // Outside the scope, the thread's loops pass no gate.
  pool.ParallelFor(64, 1, [](int64_t, int64_t) {});
  EXPECT_EQ(pacer.stats().units, 4u);
}

TEST(PoolPacerTest, ABackgroundLoopWaitsForTheStep) {
  ThreadPool pool(2);
  PoolPacer pacer;
  PoolPacer::Foreground fg(pacer);
  fg.BeginStep();
  std::atomic<bool> looped{false};
  std::thread background([&] {
    const PoolPacer::Background scope(pacer);
    pool.ParallelFor(64, 1, [&](int64_t, int64_t) { looped = true; });
  });
  std::this_thread::sleep_for(kSettle);
  EXPECT_FALSE(looped.load()) << "a background loop ran inside a foreground step";
  // The foreground's own loops do not wait for anything.
  pool.ParallelFor(64, 1, [](int64_t, int64_t) {});
  fg.EndStep();
  background.join();
  EXPECT_TRUE(looped.load());
}

}  // namespace
}  // namespace vls
