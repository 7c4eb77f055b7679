#include "base/thread_pool.h"

#include <algorithm>

namespace vls {

namespace {
// Set while a thread runs a loop body of some pool, so nested ParallelFor calls run inline.
thread_local bool t_in_pool = false;
}  // namespace

int ThreadPool::HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) : threads_(threads > 0 ? threads : HardwareThreads()) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    published_.store(~uint64_t{0}, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  t_in_pool = true;
  for (;;) {
    const int64_t b = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (b >= n_) break;
    (*fn_)(b, std::min(n_, b + chunk_));
  }
  t_in_pool = false;
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly first: decode issues hundreds of short loops per token, and a condition
    // variable wake-up costs tens of microseconds each.
    for (int i = 0; i < 4000 && published_.load(std::memory_order_acquire) == seen; ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (closed_) continue;  // the caller already finished this loop without us
      ++active_;
    }
    RunChunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (threads_ == 1 || n <= grain || t_in_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // About four chunks per thread balances uneven chunks without much scheduling overhead.
  const int64_t chunk = std::max(grain, (n + 4 * threads_ - 1) / (4 * threads_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_ = 0;
    closed_ = false;
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks();
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  done_cv_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::RunExclusive(const std::function<void()>& fn) {
  if (t_in_pool) {
    fn();
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  fn();
}

}  // namespace vls
