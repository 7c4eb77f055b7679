#include "base/thread_pool.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace vls {

namespace {
// The loop body this thread is running (pool and participant), so calls on the same pool from
// inside it run inline as that participant instead of waiting for the pool they already hold.
struct CurrentLoop {
  const ThreadPool* pool = nullptr;
  int thread = 0;
};
thread_local CurrentLoop t_in_pool;
// The calling thread's gate (ThreadPool::SetThreadGate).
thread_local PoolGate* t_gate = nullptr;

// Marks this thread as running a loop body of `pool` until destroyed (restoring the previous
// mark: a body of one pool may run a loop of another).
class InLoop {
 public:
  InLoop(const ThreadPool* pool, int thread) : saved_(t_in_pool) { t_in_pool = {pool, thread}; }
  ~InLoop() { t_in_pool = saved_; }
  InLoop(const InLoop&) = delete;
  InLoop& operator=(const InLoop&) = delete;

 private:
  CurrentLoop saved_;
};
}  // namespace

int ThreadPool::HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {
std::string ThreadsOutOfRange(int threads) {
  return "threads: " + std::to_string(threads) + " is outside [0, " + std::to_string(kMaxThreads) +
         "] (0: all hardware threads)";
}
}  // namespace

ThreadPool::ThreadPool(int threads, const ThreadStarter& start)
    : threads_(threads > 0 ? threads : HardwareThreads()) {
  if (threads < 0 || threads_ > kMaxThreads)
    throw std::invalid_argument(ThreadsOutOfRange(threads));
  shares_ = std::make_unique<Share[]>(static_cast<size_t>(threads_));
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) {
    try {
      std::function<void()> body = [this, i] { WorkerLoop(i); };
      workers_.push_back(start ? start(std::move(body)) : std::thread(std::move(body)));
    } catch (const std::system_error& e) {
      // The destructor does not run for a constructor that throws: stop the workers that did
      // start (a joinable std::thread destroyed would terminate the process).
      StopWorkers();
      throw std::system_error(e.code(), "cannot start kernel thread " + std::to_string(i + 1) +
                                            " of " + std::to_string(threads_) + " (" +
                                            std::to_string(i) + " running)");
    } catch (...) {
      StopWorkers();
      throw;
    }
  }
}

StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(int threads, const ThreadStarter& start) {
  if (threads < 0 || threads > kMaxThreads) return InvalidArgument(ThreadsOutOfRange(threads));
  try {
    return std::make_unique<ThreadPool>(threads, start);
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string(e.what()) +
                             "; lower --threads or raise the process limits (ulimit -u, -v)");
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory starting " + std::to_string(threads) +
                             " kernel threads");
  } catch (const std::exception& e) {
    return InvalidArgument(e.what());
  }
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

ThreadPool::~ThreadPool() { StopWorkers(); }

void ThreadPool::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_.store(kStop, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

ThreadPool::Lease::Lease(ThreadPool& pool) : pool_(&pool) {
  if (t_in_pool.pool == &pool) {
    thread_ = t_in_pool.thread;
    return;
  }
  const std::thread::id self = std::this_thread::get_id();
  if (pool.owner_.load(std::memory_order_relaxed) == self) return;  // nested in our own lease
  gate_ = t_gate;
  if (gate_ != nullptr) gate_->Enter();
  pool.run_mu_.lock();
  pool.owner_.store(self, std::memory_order_relaxed);
  locked_ = true;
}

ThreadPool::Lease::~Lease() {
  if (!locked_) return;
  pool_->owner_.store(std::thread::id(), std::memory_order_relaxed);
  pool_->run_mu_.unlock();
  if (gate_ != nullptr) gate_->Leave();
}

PoolGate* ThreadPool::SetThreadGate(PoolGate* gate) { return std::exchange(t_gate, gate); }

void ThreadPool::Fail(std::exception_ptr e) {
  // Chunks not yet claimed are skipped: RunChunks checks failed_ before every claim.
  if (!failed_.exchange(true, std::memory_order_acq_rel)) error_ = std::move(e);
}

namespace {
constexpr uint64_t Pack(uint64_t front, uint64_t back) { return back << 32 | front; }
constexpr int64_t Front(uint64_t range) { return static_cast<int64_t>(range & 0xffffffffu); }
constexpr int64_t Back(uint64_t range) { return static_cast<int64_t>(range >> 32); }
}  // namespace

bool ThreadPool::ClaimFront(int t, int64_t* begin, int64_t* end) {
  std::atomic<uint64_t>& share = shares_[static_cast<size_t>(t)].range;
  uint64_t r = share.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t f = Front(r), b = Back(r);
    if (f >= b) return false;
    // A quarter of what is left, at least piece_: long runs first, small ones at the end so
    // that the participants finish together.
    const int64_t size = std::min(b - f, std::max(piece_, (b - f) / 4));
    if (share.compare_exchange_weak(r,
                                    Pack(static_cast<uint64_t>(f + size), static_cast<uint64_t>(b)),
                                    std::memory_order_relaxed)) {
      *begin = f;
      *end = f + size;
      return true;
    }
  }
}

bool ThreadPool::StealBack(int t) {
  for (;;) {
    int victim = -1;
    int64_t most = 0;
    uint64_t seen = 0;
    for (int v = 0; v < threads_; ++v) {
      const uint64_t r = shares_[static_cast<size_t>(v)].range.load(std::memory_order_relaxed);
      if (Back(r) - Front(r) > most) {
        most = Back(r) - Front(r);
        victim = v;
        seen = r;
      }
    }
    if (victim < 0) return false;
    // The back half (all of a share shorter than two chunks), into our own empty share.
    const int64_t f = Front(seen), b = Back(seen);
    const int64_t mid = b - f < 2 * piece_ ? f : b - (b - f) / 2;
    std::atomic<uint64_t>& share = shares_[static_cast<size_t>(victim)].range;
    if (!share.compare_exchange_strong(seen,
                                       Pack(static_cast<uint64_t>(f), static_cast<uint64_t>(mid)),
                                       std::memory_order_relaxed)) {
      continue;  // its owner or another thief moved it: look again
    }
    shares_[static_cast<size_t>(t)].range.store(
        Pack(static_cast<uint64_t>(mid), static_cast<uint64_t>(b)), std::memory_order_relaxed);
    return true;
  }
}

void ThreadPool::RunChunks(int thread) {
  const InLoop in_loop(this, thread);
  int64_t b = 0, e = 0;
  while (!failed_.load(std::memory_order_relaxed)) {
    if (!ClaimFront(thread, &b, &e)) {
      if (StealBack(thread)) continue;  // (a thief may take it before we do: claim again)
      break;
    }
    try {
      (*fn_)(b * unit_, std::min(n_, e * unit_), thread);
    } catch (...) {
      Fail(std::current_exception());
    }
  }
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

void ThreadPool::WorkerLoop(int thread) {
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
    RunChunks(thread);
    Leave();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  ParallelFor(n, grain, [&fn](int64_t b, int64_t e, int /*thread*/) { fn(b, e); });
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const Body& fn) {
  if (n <= 0) return;
  if (t_in_pool.pool == this) {
    fn(0, n, t_in_pool.thread);
    return;
  }
  grain = std::max<int64_t>(grain, 1);
  // Inline loops hold the pool too: they run as participant 0, whose state a concurrent
  // caller's loop would otherwise share.
  const Lease lease(*this);
  if (threads_ == 1 || n <= grain) {
    const InLoop in_loop(this, 0);
    fn(0, n, 0);
    return;
  }
  // The shares (ThreadPool::ParallelFor's scheduling), in units that fit 32 bits.
  constexpr int64_t kMaxUnits = int64_t{1} << 32;
  const int64_t unit = n < kMaxUnits ? 1 : (n + kMaxUnits - 2) / (kMaxUnits - 1);
  const int64_t units = (n + unit - 1) / unit;
  fn_ = &fn;
  n_ = n;
  unit_ = unit;
  piece_ = std::max((grain + unit - 1) / unit, units / (32 * int64_t{threads_}));
  for (int t = 0; t < threads_; ++t) {
    const auto f = static_cast<uint64_t>(units * t / threads_);
    const auto b = static_cast<uint64_t>(units * (t + 1) / threads_);
    shares_[static_cast<size_t>(t)].range.store(Pack(f, b), std::memory_order_relaxed);
  }
  const uint64_t g = ++generation_;
  state_.store(StateGeneration(g), std::memory_order_release);  // open, nobody inside
  {
    std::lock_guard<std::mutex> lock(mu_);  // a worker checks published_ under mu_ before sleeping
    published_.store(g, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks(0);
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
  // Every joined worker has left (the acquire above orders its error_ store before this).
  if (failed_.load(std::memory_order_relaxed)) {
    failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(std::exchange(error_, nullptr));
  }
}

void ThreadPool::RunExclusive(const std::function<void()>& fn) {
  const Lease lease(*this);
  fn();
}

}  // namespace vls
