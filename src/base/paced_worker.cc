#include "base/paced_worker.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>
#include <system_error>

namespace vls {

namespace {
Status RunGuarded(const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory in a background job");
  } catch (const std::exception& e) {
    return Internal(std::string("a background job failed: ") + e.what());
  }
}
}  // namespace

PacedWorker::~PacedWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PacedWorker::StartLocked() {
  if (thread_.joinable()) return true;
  try {
    thread_ = std::thread([this] { Loop(); });
  } catch (const std::system_error&) {
    return false;
  }
  worker_id_ = thread_.get_id();
  return true;
}

void PacedWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&]() VLS_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Job* job = queue_.front();
    queue_.pop_front();
    job->started = true;
    stats_.queued_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - job->asked).count();
    lock.unlock();
    Status result;
    {
      const PoolPacer::Background background(*pacer_);
      result = RunGuarded(*job->fn);
    }
    lock.lock();
    job->result = std::move(result);
    job->done = true;
    ++stats_.jobs;
    done_cv_.notify_all();
  }
}

Status PacedWorker::Run(const std::function<Status()>& job,
                        const std::function<bool()>& cancelled) {
  Job j;
  j.fn = &job;
  std::unique_lock<std::mutex> lock(mu_);
  if (std::this_thread::get_id() == worker_id_ || stopping_ || !StartLocked()) {
    lock.unlock();
    const PoolPacer::Background background(*pacer_);
    return RunGuarded(job);
  }
  j.asked = std::chrono::steady_clock::now();
  queue_.push_back(&j);
  work_cv_.notify_all();
  while (!j.done) {
    // Polled under the queue's lock: the job cannot start meanwhile, so `cancelled` (which the
    // job may poll too, and which need not be thread-safe) never runs on two threads at once.
    if (!j.started && cancelled && cancelled()) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), &j));
      return Cancelled("the request was cancelled while it waited for the image encoder");
    }
    done_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return std::move(j.result);
}

PacedWorker::Stats PacedWorker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace vls
