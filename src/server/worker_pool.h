// An elastic pool of worker threads for the HTTP transport: a request being computed (a
// generation streams for minutes) holds its thread, so a fixed pool of N would let N slow
// requests lock everyone else out. A thread starts whenever every thread is busy, up to
// `max_threads` (beyond that, jobs wait), and a thread idle for a minute ends.
//
// Thread safety: Post() from any thread. Shutdown() waits for every thread to end.
#ifndef VLSTACK_SERVER_WORKER_POOL_H_
#define VLSTACK_SERVER_WORKER_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include "base/thread_annotations.h"

namespace vls::server {

class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads) : max_(max_threads < 1 ? 1 : max_threads) {}
  ~WorkerPool() { Shutdown(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Post(std::function<void()> job);
  // Runs what is queued, then ends every thread; Post() after it runs nothing.
  void Shutdown();
  size_t threads() const;

 private:
  void Work();

  const size_t max_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> jobs_ VLS_GUARDED_BY(mu_);
  size_t idle_ VLS_GUARDED_BY(mu_) = 0;
  size_t threads_ VLS_GUARDED_BY(mu_) = 0;
  bool stop_ VLS_GUARDED_BY(mu_) = false;
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_WORKER_POOL_H_
