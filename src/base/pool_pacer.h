// Shares a thread pool's time between a foreground whose users wait on every step (an engine
// decoding token streams) and background work that can wait a little (encoding an image), so the
// foreground keeps an even step period while the background runs (ADR 0030).
//
// The background runs in units: every outermost hold of a pool (ThreadPool::Lease, so every
// loop) by a thread inside a PoolPacer::Background scope, and explicit PoolPacer::Units around
// its serial work (decoding a picture). One unit runs at a time, and
//   - while no foreground is busy, units start whenever the last one ended;
//   - while one is busy, units start only in the window after its step: `share` × that step's
//     time, less what earlier units ran past their windows (so a long unit is paid back by the
//     windows after it, and the background keeps its share on average, never more).
// A foreground step starts once the running unit ends and its window is over, or at once when
// no background work is under way. So while both run, the foreground's step period is its step
// × (1 + share) give or take one unit, and the background has share / (1 + share) of the pool.
//
// Thread safety: every method may be called from any thread. A Foreground belongs to one thread
// (its steps), a Background or Unit to the thread that made it.
#ifndef VLSTACK_BASE_POOL_PACER_H_
#define VLSTACK_BASE_POOL_PACER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/thread_pool.h"

namespace vls {

// The default share (`vlstack serve --encode-share`): the background gets half a step per step.
inline constexpr double kDefaultPacerShare = 0.5;
// The largest share accepted: beyond it the foreground would wait more than it runs by far.
inline constexpr double kMaxPacerShare = 16.0;

class PoolPacer final : public PoolGate {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PoolPacer(double share = kDefaultPacerShare) : share_(share) {}
  PoolPacer(const PoolPacer&) = delete;
  PoolPacer& operator=(const PoolPacer&) = delete;

  // InvalidArgument unless 0 < share <= kMaxPacerShare (NaN included).
  Status SetShare(double share) VLS_EXCLUDES(mu_);
  double share() const VLS_EXCLUDES(mu_);

  // One foreground (an engine thread). Its first BeginStep makes it busy until Idle().
  class Foreground {
   public:
    explicit Foreground(PoolPacer& pacer) : pacer_(&pacer) {}
    ~Foreground() { Idle(); }
    Foreground(const Foreground&) = delete;
    Foreground& operator=(const Foreground&) = delete;

    // Waits for the running background unit and the current window, then marks a step running
    // (background units wait for it).
    void BeginStep();
    // Ends the step begun last and opens the window its time earns the background.
    void EndStep();
    // Nothing to run for now: the background runs freely until the next BeginStep.
    void Idle();

   private:
    PoolPacer* pacer_;
    bool busy_ = false;
    bool stepping_ = false;
    Clock::time_point start_;
  };

  // Background work of this pacer on the calling thread while it lives: its outermost pool holds
  // become units (ThreadPool::SetThreadGate), and a foreground step waits for the window while
  // any Background lives. Nests; restores the thread's previous gate.
  class Background {
   public:
    explicit Background(PoolPacer& pacer);
    ~Background();
    Background(const Background&) = delete;
    Background& operator=(const Background&) = delete;

   private:
    PoolPacer* pacer_;
    PoolGate* previous_;
  };

  // One unit of serial background work (a unit held across pool loops makes them one unit).
  class Unit {
   public:
    explicit Unit(PoolPacer& pacer) : pacer_(&pacer) { pacer_->Enter(); }
    ~Unit() { pacer_->Leave(); }
    Unit(const Unit&) = delete;
    Unit& operator=(const Unit&) = delete;

   private:
    PoolPacer* pacer_;
  };

  struct Stats {
    uint64_t units = 0;               // background units run
    double unit_seconds = 0;          // their time
    double longest_unit_seconds = 0;  // the longest one
    double waited_seconds = 0;        // background time spent waiting for a window
  };
  Stats stats() const VLS_EXCLUDES(mu_);

  // PoolGate (a unit; nests per thread). Called by ThreadPool::Lease and Unit.
  void Enter() override VLS_EXCLUDES(mu_);
  void Leave() override VLS_EXCLUDES(mu_);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  double share_ VLS_GUARDED_BY(mu_);
  int busy_ VLS_GUARDED_BY(mu_) = 0;        // foregrounds between a BeginStep and Idle
  int stepping_ VLS_GUARDED_BY(mu_) = 0;    // foregrounds inside a step
  int background_ VLS_GUARDED_BY(mu_) = 0;  // Background scopes alive
  bool unit_running_ VLS_GUARDED_BY(mu_) = false;
  bool unit_in_window_ VLS_GUARDED_BY(mu_) = false;  // it started while a foreground was busy
  Clock::time_point unit_start_ VLS_GUARDED_BY(mu_);
  // Background units may start until then while a foreground is busy.
  Clock::time_point window_end_ VLS_GUARDED_BY(mu_);
  // Time units ran past their windows, taken from the next windows.
  Clock::duration debt_ VLS_GUARDED_BY(mu_){};
  Stats stats_ VLS_GUARDED_BY(mu_);
};

}  // namespace vls

#endif  // VLSTACK_BASE_POOL_PACER_H_
