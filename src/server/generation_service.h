// The generation service: owns the batch engine (running on its own thread) for the server, and
// hands each request's output to the HTTP thread serving it.
//
//   Submit(prepared chat) -> RequestHandle; the engine's events for that request go through its
//   ReplyText (runtime/reply_text.h: detokenization, stop strings, the cancel a stop string asks
//   for) into the handle's queue of OutputPieces, which the HTTP thread drains with Take().
//   Cancel() (a client that went away) frees the slot at once.
//
// Admission control: at most `max_queue` requests wait for a slot (ResourceExhausted beyond,
// answered 429); while draining nothing new is taken (FailedPrecondition, answered 503).
// Metrics: tokens, time to first token and inter-token latency per request (ServerMetrics).
//
// Thread safety: every method may be called from any thread. Lock order: the engine's delivery
// lock, then mu_, then a handle's lock; engine calls that deliver events (Cancel) are never made
// under mu_.
#ifndef VLSTACK_SERVER_GENERATION_SERVICE_H_
#define VLSTACK_SERVER_GENERATION_SERVICE_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "runtime/batch_engine.h"
#include "runtime/chat_pipeline.h"
#include "runtime/loaded_model.h"
#include "runtime/reply_text.h"
#include "server/metrics.h"
#include "server/openai_response.h"

namespace vls::server {

using Clock = std::chrono::steady_clock;

// One request's output queue, filled by the engine thread, drained by the HTTP thread.
class RequestHandle {
 public:
  RequestHandle(uint64_t id, TextStream stream, Clock::time_point submitted)
      : id_(id), reply_(std::move(stream)), submitted_(submitted) {}

  uint64_t id() const { return id_; }
  // Moves the pieces that arrived into *out, waiting up to `timeout` for at least one. Returns
  // true when the request's last piece (a finish) has been taken.
  bool Take(std::vector<OutputPiece>* out, std::chrono::milliseconds timeout);
  bool finished() const;
  Clock::time_point submitted() const { return submitted_; }
  // When the first token arrived (unset before).
  std::optional<Clock::time_point> first_token() const;

 private:
  friend class GenerationService;
  // Runs an engine event through the reply's text (ReplyText) into the queue. Returns false when
  // a stop string finished the reply while the engine still runs the request.
  bool Push(const TokenEvent& e, Clock::time_point now, ServerMetrics* metrics);

  const uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ReplyText reply_ VLS_GUARDED_BY(mu_);  // finished once the last piece was queued
  std::deque<OutputPiece> pieces_ VLS_GUARDED_BY(mu_);
  bool taken_end_ VLS_GUARDED_BY(mu_) = false;  // ... and taken
  const Clock::time_point submitted_;
  std::optional<Clock::time_point> first_ VLS_GUARDED_BY(mu_);
  Clock::time_point last_ VLS_GUARDED_BY(mu_);
};

class GenerationService;

// A place in the queue taken before a request's (slow) preparation: image decoding and encoding
// count against max_queue like waiting requests. Handed to Submit, or returned when destroyed
// (a request refused or cancelled while being prepared). Movable; the service must outlive it.
class QueueTicket {
 public:
  QueueTicket() = default;
  QueueTicket(QueueTicket&& o) noexcept : service_(o.service_) { o.service_ = nullptr; }
  QueueTicket& operator=(QueueTicket&& o) noexcept;
  QueueTicket(const QueueTicket&) = delete;
  QueueTicket& operator=(const QueueTicket&) = delete;
  ~QueueTicket() { Release(); }
  void Release();
  bool held() const { return service_ != nullptr; }

 private:
  friend class GenerationService;
  explicit QueueTicket(GenerationService* service) : service_(service) {}
  GenerationService* service_ = nullptr;
};

struct ServiceOptions {
  size_t max_queue = 64;  // requests waiting for a slot; more are refused (429)
};

struct ServiceLoad {
  int64_t queued = 0;     // waiting for a slot
  int64_t busy = 0;       // slots running a request
  int64_t slots = 0;      // slots in all
  int64_t in_flight = 0;  // submitted and not finished
  int64_t reserved = 0;   // queue tickets held by requests being prepared
  // Speculative decoding so far (EngineCounters): verify passes, drafted and accepted tokens.
  int64_t verify_passes = 0, draft_tokens = 0, accepted_draft_tokens = 0;
  // Engine steps, prefill chunks, and the steps whose pass carried both chunks and decode rows.
  int64_t steps = 0, prefill_chunks = 0, mixed_passes = 0;
  int64_t copied_prefixes = 0;  // admissions that copied a prefix's KV rows from another slot
  // Paged KV memory: preemptions, evictions, the pool's blocks and those in use.
  int64_t kv_preemptions = 0, kv_evictions = 0, kv_blocks = 0, kv_blocks_used = 0;
  int64_t prefix_cache_blocks = 0, kv_blocks_cached = 0;  // the prefix cache
};

class GenerationService {
 public:
  // Creates the engine and starts its thread.
  static StatusOr<std::unique_ptr<GenerationService>> Create(const LoadedModel& model,
                                                             const ChatPipeline& pipeline,
                                                             EngineOptions engine_options,
                                                             ServiceOptions options,
                                                             ServerMetrics* metrics);
  ~GenerationService();  // stops the engine (requests still running are cancelled)
  GenerationService(const GenerationService&) = delete;
  GenerationService& operator=(const GenerationService&) = delete;

  // Takes a place in the queue for a request about to be prepared (Prepare decodes its
  // images): ResourceExhausted when `max_queue` requests (waiting or holding tickets) already
  // wait; FailedPrecondition while draining.
  StatusOr<QueueTicket> Reserve();
  // Queues a prepared request. ResourceExhausted when `max_queue` requests already wait
  // (tickets count); FailedPrecondition while draining; the engine's validation errors as they
  // are. With a held ticket the request takes the ticket's place (no second queue check).
  StatusOr<std::shared_ptr<RequestHandle>> Submit(PreparedChat chat);
  StatusOr<std::shared_ptr<RequestHandle>> Submit(PreparedChat chat, QueueTicket ticket);
  // Cancels a request that has not finished (a client that went away); its cancelled piece is
  // queued before this returns. A finished request is left alone.
  void Cancel(const RequestHandle& handle);

  // From now on Submit refuses new requests; those in flight go on.
  void BeginDrain();
  bool draining() const;
  // Waits until nothing is in flight or `timeout` passed; true when idle.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Cancels every request in flight (the end of a drain that timed out).
  void CancelAll();

  ServiceLoad load() const;
  const ChatPipeline& pipeline() const { return pipeline_; }

 private:
  GenerationService(const ChatPipeline& pipeline, ServiceOptions options, ServerMetrics* metrics)
      : pipeline_(pipeline), options_(options), metrics_(metrics) {}
  bool OnEvent(const TokenEvent& e);
  friend class QueueTicket;
  // Whether one more request may wait (reservations count). REQUIRES: mu_ held.
  bool QueueFull() const VLS_REQUIRES(mu_);

  const ChatPipeline& pipeline_;
  const ServiceOptions options_;
  ServerMetrics* metrics_;
  int slots_ = 0;
  std::unique_ptr<BatchEngine> engine_;

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::unordered_map<uint64_t, std::shared_ptr<RequestHandle>> live_ VLS_GUARDED_BY(mu_);
  bool draining_ VLS_GUARDED_BY(mu_) = false;
  size_t reserved_ VLS_GUARDED_BY(mu_) = 0;  // tickets held
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_GENERATION_SERVICE_H_
