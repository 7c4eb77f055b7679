// A fixed pool of worker threads for data-parallel loops over the kernels.
//
// The pool is created once per loaded model (LoadOptions::threads) and passed down explicitly;
// there is no global pool, so two models never oversubscribe each other's cores by accident.
#ifndef VLSTACK_BASE_THREAD_POOL_H_
#define VLSTACK_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vls {

// Thread safety: ParallelFor may be called from any thread, but calls are serialised (one
// loop runs at a time; a second caller waits). A ParallelFor body must not call ParallelFor
// on the same pool (it would deadlock); nested loops run inline instead (see below).
class ThreadPool {
 public:
  // `threads` workers in total including the calling thread; 0 means all hardware threads.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `grain` long
  // (except the last), on up to threads() threads; the caller takes part. Returns when every
  // chunk is done. Runs inline when n <= grain, when the pool has one thread, or when called
  // from inside a loop body of this pool.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn() on the calling thread while no loop of this pool runs (ParallelFor callers
  // wait), so fn may run its own team of threads (oneDNN's OpenMP) on the cores this pool
  // stands for without oversubscribing them. The workers stay asleep. Runs fn() directly when
  // called from inside a loop body of this pool.
  void RunExclusive(const std::function<void()>& fn);

  // The number of hardware threads (at least 1).
  static int HardwareThreads();

 private:
  void WorkerLoop();
  void RunChunks();

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serialises ParallelFor callers

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped per loop; guarded by mu_
  bool stop_ = false;
  // Workers running the current loop; guarded by mu_. Once the caller has run out of chunks
  // the loop is closed: a worker that wakes later skips it instead of being waited for (on a
  // busy machine a descheduled worker would otherwise stall every loop by a time slice).
  int active_ = 0;
  bool closed_ = true;

  // The current loop (written under mu_ before generation_ is bumped).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<uint64_t> published_{0};  // generation_ mirror for the spin phase
};

}  // namespace vls

#endif  // VLSTACK_BASE_THREAD_POOL_H_
