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

// One iteration of a spin-wait (x86 `pause`): the pool's workers and callers spin with it, and
// so does anything that waits on a peer inside a ParallelFor body.
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

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

  // A worker joins the loop of generation g (a CAS on state_) unless it is closed or g has
  // passed; the caller closes its loop once it runs out of chunks and then waits for the joined
  // workers only. Both sides spin briefly before sleeping: decode issues hundreds of short
  // loops per token, and a futex sleep and wake-up costs tens of microseconds each.
  bool TryJoin(uint64_t generation);
  void Leave();

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serialises ParallelFor callers

  std::mutex mu_;  // orders the sleeps on wake_ / done_cv_ with the stores they wait for
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped per loop; written by the caller holding run_mu_

  // The current loop (written before state_ opens it).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
  // Generation of the latest loop, or kStop; workers watch it.
  std::atomic<uint64_t> published_{0};
  // [63:32] generation (low 32 bits), [31] closed, [30:0] workers inside the loop. A worker
  // that wakes after its loop closed skips it instead of being waited for (on a busy machine a
  // descheduled worker would otherwise stall every loop by a time slice).
  std::atomic<uint64_t> state_{1ull << 31};
};

}  // namespace vls

#endif  // VLSTACK_BASE_THREAD_POOL_H_
