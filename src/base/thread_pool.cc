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

namespace {
constexpr uint64_t kStop = ~uint64_t{0};
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kClosed - 1;
// Pause iterations before sleeping: tens of microseconds.
constexpr int kWorkerSpin = 4000;
constexpr int kCallerSpin = 4000;

uint64_t StateGeneration(uint64_t generation) { return (generation & 0xffffffffu) << 32; }

}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_.store(kStop, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  t_in_pool = true;
  // Guided: a chunk is a share of what is left (at least chunk_), so chunks shrink towards the
  // end and the threads finish close together instead of one waiting out another's last
  // large chunk.
  const int64_t share = 2 * static_cast<int64_t>(threads_);
  int64_t b = next_.load(std::memory_order_relaxed);
  for (;;) {
    if (b >= n_) break;
    const int64_t size = std::max(chunk_, (n_ - b) / share);
    if (!next_.compare_exchange_weak(b, b + size, std::memory_order_relaxed)) continue;
    (*fn_)(b, std::min(n_, b + size));
    b = next_.load(std::memory_order_relaxed);
  }
  t_in_pool = false;
}

bool ThreadPool::TryJoin(uint64_t generation) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((s & ~(kClosed | kCountMask)) != StateGeneration(generation) || (s & kClosed) != 0) {
      return false;
    }
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return true;
    }
  }
}

void ThreadPool::Leave() {
  const uint64_t s = state_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if ((s & kClosed) != 0 && (s & kCountMask) == 0) {
    // The caller may be asleep on done_cv_: taking mu_ orders this with its predicate check.
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_one();
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = published_.load(std::memory_order_acquire);
    for (int i = 0; i < kWorkerSpin && g == seen; ++i) {
      CpuRelax();
      g = published_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return published_.load(std::memory_order_acquire) != seen; });
      g = published_.load(std::memory_order_acquire);
    }
    if (g == kStop) return;
    seen = g;
    if (!TryJoin(g)) continue;  // the caller already finished this loop without us
    RunChunks();
    Leave();
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
  // Chunks shrink from a half share per thread down to this least size (RunChunks).
  const int64_t chunk = std::max(grain, n / (8 * threads_));
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk;
  next_.store(0, std::memory_order_relaxed);
  const uint64_t g = ++generation_;
  state_.store(StateGeneration(g), std::memory_order_release);  // open, nobody inside
  {
    std::lock_guard<std::mutex> lock(mu_);  // a worker checks published_ under mu_ before sleeping
    published_.store(g, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks();
  uint64_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  for (int i = 0; i < kCallerSpin && (s & kCountMask) != 0; ++i) {
    CpuRelax();
    s = state_.load(std::memory_order_acquire);
  }
  if ((s & kCountMask) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return (state_.load(std::memory_order_acquire) & kCountMask) == 0; });
  }
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
