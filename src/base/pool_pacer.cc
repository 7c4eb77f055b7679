#include "base/pool_pacer.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace vls {

namespace {
// The pacer whose unit this thread is in, and how deep: a pool loop inside an explicit Unit (or
// a nested lease) is part of the unit, not a unit of its own.
thread_local PoolPacer* t_unit_pacer = nullptr;
thread_local int t_unit_depth = 0;

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

Status PoolPacer::SetShare(double share) {
  if (!(share > 0 && share <= kMaxPacerShare)) {
    char text[160];
    std::snprintf(text, sizeof(text),
                  "the background share %g is outside (0, %g]: it is the time background work "
                  "may run per unit of step time",
                  share, kMaxPacerShare);
    return InvalidArgument(text);
  }
  std::lock_guard<std::mutex> lock(mu_);
  share_ = share;
  return Status::Ok();
}

double PoolPacer::share() const {
  std::lock_guard<std::mutex> lock(mu_);
  return share_;
}

PoolPacer::Stats PoolPacer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PoolPacer::Foreground::BeginStep() {
  PoolPacer& p = *pacer_;
  std::unique_lock<std::mutex> lock(p.mu_);
  if (!busy_) {
    busy_ = true;
    ++p.busy_;
  }
  while (true) {
    if (p.unit_running_) {
      p.cv_.wait(lock);
      continue;
    }
    if (p.background_ == 0 || Clock::now() >= p.window_end_) break;
    const Clock::time_point until = p.window_end_;
    p.cv_.wait_until(lock, until);
  }
  ++p.stepping_;
  stepping_ = true;
  start_ = Clock::now();
}

void PoolPacer::Foreground::EndStep() {
  PoolPacer& p = *pacer_;
  {
    std::lock_guard<std::mutex> lock(p.mu_);
    if (!stepping_) return;
    stepping_ = false;
    --p.stepping_;
    const Clock::time_point now = Clock::now();
    const auto grant = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(p.share_ * Seconds(now - start_)));
    if (p.debt_ >= grant) {
      p.debt_ -= grant;
      p.window_end_ = now;
    } else {
      p.window_end_ = now + (grant - p.debt_);
      p.debt_ = Clock::duration::zero();
    }
  }
  p.cv_.notify_all();
}

void PoolPacer::Foreground::Idle() {
  PoolPacer& p = *pacer_;
  {
    std::lock_guard<std::mutex> lock(p.mu_);
    if (stepping_) {
      stepping_ = false;
      --p.stepping_;
    }
    if (!busy_) return;
    busy_ = false;
    --p.busy_;
    // Owed time is forgotten with the load that earned it.
    if (p.busy_ == 0) p.debt_ = Clock::duration::zero();
  }
  p.cv_.notify_all();
}

PoolPacer::Background::Background(PoolPacer& pacer) : pacer_(&pacer) {
  {
    std::lock_guard<std::mutex> lock(pacer_->mu_);
    ++pacer_->background_;
  }
  previous_ = ThreadPool::SetThreadGate(pacer_);
}

PoolPacer::Background::~Background() {
  ThreadPool::SetThreadGate(previous_);
  {
    std::lock_guard<std::mutex> lock(pacer_->mu_);
    --pacer_->background_;
  }
  pacer_->cv_.notify_all();
}

void PoolPacer::Enter() {
  if (t_unit_pacer == this) {
    ++t_unit_depth;
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::time_point asked = Clock::now();
  cv_.wait(lock, [&]() VLS_REQUIRES(mu_) {
    return !unit_running_ && stepping_ == 0 && (busy_ == 0 || Clock::now() < window_end_);
  });
  unit_running_ = true;
  unit_in_window_ = busy_ > 0;
  unit_start_ = Clock::now();
  stats_.waited_seconds += Seconds(unit_start_ - asked);
  if (t_unit_pacer == nullptr) {
    t_unit_pacer = this;
    t_unit_depth = 1;
  }
}

void PoolPacer::Leave() {
  if (t_unit_pacer == this && t_unit_depth > 1) {
    --t_unit_depth;
    return;
  }
  if (t_unit_pacer == this) {
    t_unit_pacer = nullptr;
    t_unit_depth = 0;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point end = Clock::now();
    unit_running_ = false;
    if (unit_in_window_ && busy_ > 0 && end > window_end_) {
      debt_ += end - std::max(window_end_, unit_start_);
    }
    const double s = Seconds(end - unit_start_);
    ++stats_.units;
    stats_.unit_seconds += s;
    stats_.longest_unit_seconds = std::max(stats_.longest_unit_seconds, s);
  }
  cv_.notify_all();
}

}  // namespace vls
