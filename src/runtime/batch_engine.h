// The continuous-batch engine (CONTRACTS §4): B slots, each a Session with its own KV region
// of capacity C, and a FIFO queue of pending requests.
//
// One Step(): admit pending requests into free slots (each with its own prefill entry, writing
// only its slot) and sample their first token; then one shared ragged decode step over every
// active row; sample, emit, retire finished rows (EOS wins over the length limit).
//
// Thread safety: every public method may be called from any thread. Steps are serialised by
// `mu_`; Submit/Cancel wait for a running step to finish. Callbacks run on the stepping thread
// with `mu_` held: they must not call back into the engine (return false to cancel instead).
#ifndef VLSTACK_RUNTIME_BATCH_ENGINE_H_
#define VLSTACK_RUNTIME_BATCH_ENGINE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "runtime/deepstack.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace vls {

// A request owns all its buffers; cancelling it while queued frees them at once.
struct GenerationRequest {
  std::vector<int32_t> tokens;    // [S] prompt ids (token prefill, or the DeepStack visual mask)
  std::vector<float> embeddings;  // [S, H]; when non-empty the embeddings entry is used
  PositionIds positions;          // in the model's mode, length S
  int32_t rope_delta = 0;
  std::optional<DeepStackPayload> deepstack;  // requires embeddings
  int max_new_tokens = 16;
  bool ignore_eos = false;
  SamplingParams sampling;

  size_t bytes() const;  // buffer bytes this request owns
};

enum class FinishReason { kNone = 0, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenEvent {
  uint64_t request_id = 0;
  int32_t token = -1;  // -1 for a finish without a token (cancelled, error)
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

class BatchEngine {
 public:
  // Called for every event on the stepping thread. Return false to cancel the request there
  // and then (nothing more is emitted for it but its cancelled event).
  using EventCallback = std::function<bool(const TokenEvent&)>;

  // Slots and capacity come from the loaded model's static bounds.
  explicit BatchEngine(const LoadedModel& model, EventCallback callback = nullptr);
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Validates everything (CONTRACTS §2, §3, prompt + max_new_tokens <= C, sampling) and queues
  // the request. A rejected submit changes nothing.
  StatusOr<uint64_t> Submit(GenerationRequest request) VLS_EXCLUDES(mu_);
  // Cancels a queued (buffers freed now) or active (slot freed now) request. NotFound when
  // the id is unknown or already finished.
  Status Cancel(uint64_t id) VLS_EXCLUDES(mu_);

  // Runs one engine step on the calling thread. Returns the events it emitted.
  std::vector<TokenEvent> Step() VLS_EXCLUDES(mu_);
  // The admission half of Step alone (prefill + first token), so tools and tests can look at
  // the admitted slots before the first shared decode.
  std::vector<TokenEvent> AdmitPending() VLS_EXCLUDES(mu_);
  // Steps until nothing is queued or active.
  void RunUntilIdle() VLS_EXCLUDES(mu_);

  // Runs steps on an engine thread until Stop() (or destruction). Events go to the callback
  // and to the queue read by WaitEvents.
  void Start() VLS_EXCLUDES(mu_);
  void Stop() VLS_EXCLUDES(mu_);
  // Moves out the events emitted so far, waiting up to `timeout_ms` for at least one.
  std::vector<TokenEvent> WaitEvents(int timeout_ms) VLS_EXCLUDES(mu_);

  bool Idle() const VLS_EXCLUDES(mu_);
  size_t pending_count() const VLS_EXCLUDES(mu_);
  size_t active_count() const VLS_EXCLUDES(mu_);
  // Bytes owned by queued requests (memory accounting: cancel frees them).
  size_t pending_bytes() const VLS_EXCLUDES(mu_);
  // The next decode coordinate of an active request (length + delta), for tests and tools.
  std::optional<RopeCoord> NextCoordinate(uint64_t id) const VLS_EXCLUDES(mu_);
  // Which slot an active request occupies.
  std::optional<int> SlotOf(uint64_t id) const VLS_EXCLUDES(mu_);

 private:
  struct Pending {
    uint64_t id;
    GenerationRequest request;
  };
  struct Slot {
    std::unique_ptr<Session> session;
    bool active = false;
    uint64_t id = 0;
    GenerationRequest request;  // prompt tokens kept for penalties; big buffers released
    std::unique_ptr<Sampler> sampler;
    std::vector<int32_t> generated;
    int32_t next_token = -1;
  };

  Status Validate(const GenerationRequest& r) const;
  void Admit(std::vector<TokenEvent>* events) VLS_REQUIRES(mu_);
  void DecodeActive(std::vector<TokenEvent>* events) VLS_REQUIRES(mu_);
  // Records a sampled token; finishes the slot on EOS/length/callback cancel.
  void EmitToken(Slot& slot, int32_t token, std::vector<TokenEvent>* events) VLS_REQUIRES(mu_);
  void Finish(Slot& slot, FinishReason reason, const std::string& error,
              std::vector<TokenEvent>* events) VLS_REQUIRES(mu_);
  bool Deliver(const TokenEvent& e, std::vector<TokenEvent>* events) VLS_REQUIRES(mu_);
  std::vector<TokenEvent> StepLocked() VLS_REQUIRES(mu_);
  bool IdleLocked() const VLS_REQUIRES(mu_);

  const LoadedModel& model_;
  EventCallback callback_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;    // signalled on submit and stop
  std::condition_variable events_cv_;  // signalled when events are queued
  std::deque<Pending> pending_ VLS_GUARDED_BY(mu_);
  size_t pending_bytes_ VLS_GUARDED_BY(mu_) = 0;
  std::vector<Slot> slots_ VLS_GUARDED_BY(mu_);
  uint64_t next_id_ VLS_GUARDED_BY(mu_) = 1;
  std::vector<TokenEvent> event_queue_ VLS_GUARDED_BY(mu_);
  bool threaded_ VLS_GUARDED_BY(mu_) = false;
  bool stopping_ VLS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_BATCH_ENGINE_H_
