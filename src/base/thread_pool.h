// A fixed pool of worker threads for data-parallel loops over the kernels.
//
// The pool is created once per loaded model (LoadOptions::threads) and passed down explicitly;
// there is no global pool, so two models never oversubscribe each other's cores by accident.
#ifndef VLSTACK_BASE_THREAD_POOL_H_
#define VLSTACK_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"

namespace vls {

// The most participants a pool may have (--threads, LoadOptions::threads, the C ABI's
// vls_model_options::threads). Far above any machine this runs on; a larger request is a typo or
// an attack, and each thread reserves a stack (8 MiB of address space by default).
inline constexpr int kMaxThreads = 1024;

// Starts one worker thread running `body` (the default is std::thread's constructor). Throws
// std::system_error when the system refuses, as std::thread does. Tests inject failures here.
using ThreadStarter = std::function<std::thread(std::function<void()> body)>;

// One iteration of a spin-wait (x86 `pause`): the pool's workers and callers spin with it, and
// so does anything that waits on a peer inside a ParallelFor body.
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// What a thread passes through around each of its outermost holds of any pool (PoolPacer: units
// of background work paced against a foreground). Enter() runs before the thread waits for the
// pool, Leave() after it let go.
class PoolGate {
 public:
  virtual void Enter() = 0;
  virtual void Leave() = 0;

 protected:
  ~PoolGate() = default;
};

// Participants: a loop runs on its calling thread, participant 0, and on the workers,
// participants 1..threads()-1. Every chunk is told its participant, and one participant runs
// one chunk at a time, so per-participant state (kernels::Context's scratch arenas) indexed by
// it needs no lock.
//
// Thread safety: ParallelFor, RunExclusive and Lease may be used from any thread, but they are
// serialised: one caller holds the pool at a time (for one loop, one RunExclusive or one
// Lease); the others wait. A loop body may call ParallelFor, RunExclusive or Lease on the same
// pool: those run inline on the body's thread as the body's participant (nothing is waited
// for). A thread holding the pool must not wait for another thread that needs it.
//
// Exceptions: when a chunk throws, chunks that have not started are skipped and ParallelFor
// rethrows the first exception on the calling thread once every started chunk has finished.
// No exception escapes a worker, and the pool stays usable.
class ThreadPool {
 public:
  // `threads` participants in total including the calling thread; 0 means all hardware
  // threads. InvalidArgument when threads is outside [0, kMaxThreads]; ResourceExhausted (naming
  // how many threads started) when the system refuses a thread (ulimit -u, an address-space
  // limit too small for the stacks): the workers already started are stopped and joined.
  static StatusOr<std::unique_ptr<ThreadPool>> Create(int threads,
                                                      const ThreadStarter& start = nullptr);
  // The same, throwing: std::invalid_argument for a bad count, std::system_error (after joining
  // the workers already started) when a thread cannot start. Prefer Create.
  explicit ThreadPool(int threads, const ThreadStarter& start = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end, thread) over disjoint chunks covering [0, n) on up to threads()
  // participants; `thread` is the participant running the chunk. Returns when every chunk is
  // done. Runs inline (as participant 0) when n <= grain or the pool has one thread, and inline
  // as the body's participant when called from inside a loop body of this pool.
  //
  // Scheduling: participant t owns the t-th of threads() equal shares of [0, n) and runs it
  // front to back in chunks of at least `grain` (a quarter of what it has left, down to
  // n / (32 · threads()); the last piece of a share may be shorter); a participant with nothing
  // left takes the back half of the fullest share into its own and goes on there. Each
  // participant thus walks few long contiguous runs (a weight stream restarts at every jump:
  // about a microsecond of memory latency each), and the participants finish within one small
  // chunk of each other whatever their speeds or start times (ADR 0035).
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);
  // The same for a body that needs no participant index.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn() on the calling thread while it holds the pool (as a Lease), so fn may run its
  // own team of threads (oneDNN's OpenMP) on the cores this pool stands for without
  // oversubscribing them: the workers stay asleep unless fn runs loops of this pool. Runs fn()
  // directly when called from inside a loop body of this pool. Exceptions of fn propagate.
  void RunExclusive(const std::function<void()>& fn);

  // Holds the pool for the calling thread while it lives, across several loops and the serial
  // work between them: loops, RunExclusive calls and leases of other threads wait; this
  // thread's own ones run at once, as participant 0. Inside a loop body of this pool it waits
  // for nothing and stands for the body's participant. thread() is the participant whose
  // per-participant state the holder may use.
  class Lease {
   public:
    explicit Lease(ThreadPool& pool);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    int thread() const { return thread_; }

   private:
    ThreadPool* pool_;
    bool locked_ = false;  // this lease took run_mu_ (the outermost one of its thread)
    int thread_ = 0;
    PoolGate* gate_ = nullptr;  // entered before run_mu_, left after it
  };

  // The number of hardware threads (at least 1).
  static int HardwareThreads();

  // Sets the calling thread's gate (null: none) for its outermost holds of every pool from now
  // on (a hold nested in another, or inside a loop body, passes no gate). Returns the previous.
  static PoolGate* SetThreadGate(PoolGate* gate);

 private:
  using Body = std::function<void(int64_t, int64_t, int)>;

  void WorkerLoop(int thread);
  // Tells the workers to exit and joins them.
  void StopWorkers();
  void RunChunks(int thread);
  // The next chunk of participant t's share, from its front, in units: false when it is empty.
  bool ClaimFront(int t, int64_t* begin, int64_t* end);
  // Moves the back half of the fullest share into participant t's (empty) own: false when
  // every share is empty.
  bool StealBack(int t);
  // Records the first exception of the current loop and stops handing out chunks.
  void Fail(std::exception_ptr e);

  // A worker joins the loop of generation g (a CAS on state_) unless it is closed or g has
  // passed; the caller closes its loop once it runs out of chunks and then waits for the joined
  // workers only. Both sides spin briefly before sleeping: decode issues hundreds of short
  // loops per token, and a futex sleep and wake-up costs tens of microseconds each.
  bool TryJoin(uint64_t generation);
  void Leave();

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // held by the thread that holds the pool (Lease)
  // That thread while it holds run_mu_, else none: a thread that finds itself here holds the
  // pool (only it stores its own id), so its nested leases do not lock again.
  std::atomic<std::thread::id> owner_{};

  std::mutex mu_;  // orders the sleeps on wake_ / done_cv_ with the stores they wait for
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped per loop; written by the caller holding run_mu_

  // The current loop (written before state_ opens it): [0, n) in units of unit_ indices (1 unless
  // n >= 2³², so that a share's bounds fit in 32 bits), chunks of at least piece_ units.
  const Body* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t unit_ = 1;
  int64_t piece_ = 1;
  // Participant t's share: [front, back) packed as back << 32 | front, on its own cache line.
  // Its owner takes chunks from the front, a participant with none left the back half.
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  std::unique_ptr<Share[]> shares_;
  // Set by the first chunk of the current loop that throws, which stores its exception in
  // error_; the caller reads both after the joined workers have left.
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  // Generation of the latest loop, or kStop; workers watch it.
  std::atomic<uint64_t> published_{0};
  // [63:32] generation (low 32 bits), [31] closed, [30:0] workers inside the loop. A worker
  // that wakes after its loop closed skips it instead of being waited for (on a busy machine a
  // descheduled worker would otherwise stall every loop by a time slice).
  std::atomic<uint64_t> state_{1ull << 31};
};

}  // namespace vls

#endif  // VLSTACK_BASE_THREAD_POOL_H_
