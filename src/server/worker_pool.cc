#include "server/worker_pool.h"

#include <chrono>
#include <system_error>
#include <thread>
#include <utility>

namespace vls::server {

void WorkerPool::Post(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  jobs_.push_back(std::move(job));
  if (jobs_.size() > idle_ && threads_ < max_) {
    try {
      std::thread([this] { Work(); }).detach();
      ++threads_;
    } catch (const std::system_error&) {  // no thread now: a running one takes the job later
    }
  }
  cv_.notify_one();
}

void WorkerPool::Shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  done_cv_.wait(lock, [this] { return threads_ == 0; });
}

size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_;
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++idle_;
    const bool woken =
        cv_.wait_for(lock, std::chrono::seconds(60), [this] { return !jobs_.empty() || stop_; });
    --idle_;
    if (jobs_.empty()) {  // idle for a minute, or stopping with nothing left to do
      if (woken && !stop_) continue;
      --threads_;
      done_cv_.notify_all();
      return;  // `this` is not touched after the lock is released
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what the job held is released before the thread counts as idle
    lock.lock();
  }
}

}  // namespace vls::server
