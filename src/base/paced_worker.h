// One thread that runs jobs one at a time, in order of arrival, as background work of a
// PoolPacer: the image encoder's worker (runtime/image_encoder.h). A caller hands a job over and
// waits for its result, so the job may use the caller's references; the thread that accepted the
// request (an HTTP thread) does none of the job's work, and the pacer decides when it runs.
//
// Thread safety: Run may be called from any thread, also from a job (which then runs inline).
#ifndef VLSTACK_BASE_PACED_WORKER_H_
#define VLSTACK_BASE_PACED_WORKER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/pool_pacer.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace vls {

class PacedWorker {
 public:
  explicit PacedWorker(PoolPacer& pacer) : pacer_(&pacer) {}
  // Lets the running job finish and joins the thread. REQUIRES: no Run is waiting.
  ~PacedWorker();
  PacedWorker(const PacedWorker&) = delete;
  PacedWorker& operator=(const PacedWorker&) = delete;

  // Runs job() on the worker thread inside a PoolPacer::Background scope, after the jobs handed
  // over before it, and returns its status. `cancelled` (may be null) is polled every 50 ms
  // while the job waits for its turn: when it answers true, the job is dropped unrun and Run
  // returns Cancelled. A job that started runs to its end (it may poll `cancelled` itself;
  // Run never calls it once the job has started, so it need not be thread-safe). `cancelled`
  // runs under the worker's lock: it must not call Run.
  // When the worker thread cannot start, the job runs on the calling thread, still paced.
  Status Run(const std::function<Status()>& job, const std::function<bool()>& cancelled = nullptr)
      VLS_EXCLUDES(mu_);

  struct Stats {
    uint64_t jobs = 0;          // jobs run
    double queued_seconds = 0;  // their time waiting for their turn
  };
  Stats stats() const VLS_EXCLUDES(mu_);

 private:
  struct Job {
    const std::function<Status()>* fn = nullptr;
    std::chrono::steady_clock::time_point asked;
    Status result;
    bool started = false, done = false;
  };

  void Loop() VLS_EXCLUDES(mu_);
  // Starts the thread if it has not started; false when the system refuses.
  bool StartLocked() VLS_REQUIRES(mu_);

  PoolPacer* pacer_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job*> queue_ VLS_GUARDED_BY(mu_);
  bool stopping_ VLS_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Run; joined by the destructor
  std::thread::id worker_id_ VLS_GUARDED_BY(mu_);
  Stats stats_ VLS_GUARDED_BY(mu_);
};

}  // namespace vls

#endif  // VLSTACK_BASE_PACED_WORKER_H_
