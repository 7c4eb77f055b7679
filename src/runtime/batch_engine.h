// The continuous-batch engine (docs/contracts.md §4): B slots, each a Session whose KV cache
// takes blocks of one shared pool as its sequence grows (paged KV memory, ADR 0029; sequences
// up to C positions), and a FIFO queue of pending requests. When the pool runs out, free slots'
// kept rows are dropped and then the most recently admitted sequences are preempted and later
// resumed by recomputation (batch_engine_memory.cc).
//
// One Step():
//   1. apply the cancels that arrived since the last step (their slots become free);
//   2. admit queued requests into free slots, each into the free slot whose kept rows share the
//      longest prefix with its prompt (prefix reuse: token ids, positions and the content of
//      embedding rows and DeepStack features all have to match), so only the rest is prefilled;
//      a slot counts as a match only when the prompt keeps at least half of its rows, else an
//      empty or the least recently admitted slot is taken, so that a new conversation does not
//      evict another's cache for the template tokens they share; when another slot (running or
//      free) holds a prefix at least kMinCopiedRows rows longer, its KV rows are copied into the
//      chosen slot instead of being prefilled (a shared system prompt, an image two users send);
//   3. choose this step's rows: the decode rows of every slot past its prefill (with drafts, see
//      below), and prompt chunks over the prefilling slots in admission order within the chunk
//      budget: `prefill_chunk` rows per prefilling slot while any slot decodes, so one long
//      prompt never stalls the others' decode, else up to a whole prompt of the engine's capacity
//      (a prompt alone is prefilled in one pass: its time to first token is the unchunked
//      prefill's);
//   4. run them in ONE ragged forward pass (Session::RunStep, entry step.main), so each weight is
//      read once per step; a slot whose prompt completes samples its first token (it decodes
//      from the next step on); sample, emit, retire finished rows (EOS or a stop id wins over the
//      length limit; a row whose logits hold a NaN or an infinity ends its request with an
//      error, the others go on). When the pass fails, each chunk and the decode rows run again
//      in passes of their own, so a failure stays with its request. A speculating slot runs its
//      last token plus its drafts (prompt lookup or the draft model) as consecutive rows of the
//      same pass and emits the accepted prefix and one more token, one event each
//      (docs/speculative.md).
// Structured output (GenerationRequest::grammar): each such request has a grammar matcher; every
// token it samples (or verifies) is drawn under the matcher's token mask, its end tokens allowed
// only where the grammar may end, and it finishes with "stop" as soon as the grammar admits
// nothing more (the last token's ordinary event, then a "stop" event without a token: a "stop"
// event that carries a token always carries the EOS or stop id that ended it). Drafts are cut at
// their first token the grammar refuses before the pass. The mask of a row's next token is computed
// on a helper thread while the decode pass runs (batch_engine_grammar.cc); a mask failure finishes
// only its request, with an error. Chunks keep M-RoPE positions continuous and slice the DeepStack
// payload per chunk (positions rebased, exactly the feature rows of the chunk), so results equal
// the unchunked prefill.
//
// Thread safety: every public method may be called from any thread. Steps are serialised by
// `step_mu_`; Submit and Cancel only touch the queue (`mu_`) and return at once while a step
// runs. Events are delivered after the step has released `step_mu_`, in step order, one
// delivery at a time: the callback may call Submit and Cancel (not Step). A request emits nothing
// after its finish event, whichever path (cancel, stop, error, length) finished it.
#ifndef VLSTACK_RUNTIME_BATCH_ENGINE_H_
#define VLSTACK_RUNTIME_BATCH_ENGINE_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "grammar/matcher.h"
#include "runtime/deepstack.h"
#include "runtime/model_draft.h"
#include "runtime/request.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace vls {

enum class FinishReason { kNone = 0, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct TokenEvent {
  uint64_t request_id = 0;
  int32_t token = -1;  // -1 for a finish without a token (cancelled, error)
  FinishReason finish = FinishReason::kNone;
  std::string error;
  // Usage, on every event of the request: prompt rows S, rows served from prefix reuse, and
  // tokens generated so far (this one included).
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t generated_tokens = 0;
  // With GenerationRequest::logprobs >= 0: the token's log-probability under the model's
  // distribution (log-softmax of the raw logits), and the `logprobs` most likely tokens.
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

struct EngineOptions {
  // Most prompt rows prefilled in one step per prefilling slot while any slot decodes (0: whole
  // prompts at once); with nothing decoding a step takes up to a whole prompt of the capacity. 64
  // keeps the other streams' p99 inter-token latency within 3x the median while a 4,096-token
  // prompt arrives on the 0.6B shape on 2 cores (128 does not; ADR 0012), at about 1.2x the
  // unchunked prefill time of that prompt.
  int prefill_chunk = 64;
  // Admit a request into the free slot whose kept rows share its longest prefix.
  bool prefix_reuse = true;
  // Speculative decoding for requests that do not set their own (GenerationRequest::speculative):
  // prompt-lookup drafts of up to draft_tokens tokens, verified in the shared decode pass
  // (docs/speculative.md). Off by default.
  SpeculativeParams speculative = {};
  // The draft model of DraftSource::kModel speculation (not owned; outlives the engine): same
  // vocabulary, loaded for at least the engine's slots (CheckDraftModel). Null: requests cannot
  // speculate from a model.
  const LoadedModel* draft_model = nullptr;
  // Tests only: called with "admit", "prefill" or "sample" and the request id at those points
  // of a step; whatever it throws is treated as that request's failure (fault injection). Also
  // "step" with the id of each request whose chunk joins the step's pass, just before it runs:
  // a throw there fails the pass, whose parts then run again in passes of their own.
  std::function<void(std::string_view point, uint64_t request_id)> fault_hook_for_testing = nullptr;
};

// What the engine has done so far (for metrics).
struct EngineCounters {
  uint64_t submitted = 0, finished = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  uint64_t steps = 0, prefill_chunks = 0;
  // Steps whose one pass carried prefill chunks and decode rows together (step.main).
  uint64_t mixed_passes = 0;
  // Admissions that copied a prompt prefix's KV rows from another slot (prefix reuse across
  // slots) instead of prefilling them.
  uint64_t copied_prefixes = 0;
  // The prefix cache: blocks a prompt took, shared, from the pool's named blocks instead of
  // computing them; and the named blocks no sequence references (kept, evictable) at the end of
  // the step.
  uint64_t shared_prefix_blocks = 0, kv_blocks_cached = 0;
  // Paged KV memory: sequences preempted because the pool ran out (their blocks freed, their
  // requests resumed later by recomputing their rows), and the kept rows of free slots dropped
  // to make room.
  uint64_t preemptions = 0, evictions = 0;
  // The pool's blocks (kKvBlockKeys positions each) and those held when the step ended.
  uint64_t kv_blocks = 0, kv_blocks_used = 0;
  // Speculative decoding: verify passes (decode rows that carried drafts), tokens drafted, and
  // drafted tokens accepted (emitted as drafted).
  uint64_t verify_passes = 0, draft_tokens = 0, accepted_draft_tokens = 0;
  // Structured output: token masks computed, the time spent computing them (on any thread),
  // and the part of it the steps waited for (masks computed inline, and the wait for the helper
  // thread after the decode pass): the masks' cost on the critical path.
  uint64_t grammar_masks = 0, grammar_mask_ns = 0, grammar_mask_wait_ns = 0;
};

class BatchEngine {
 public:
  // Called for every event, outside the step lock (see above). Return false to cancel the
  // request there and then (nothing more is emitted for it but its cancelled event).
  using EventCallback = std::function<bool(const TokenEvent&)>;

  // Slots and capacity come from the loaded model's static bounds. ResourceExhausted when the
  // slots' KV caches cannot be allocated; InvalidArgument when the options do not fit the model
  // (ValidateOptions).
  static StatusOr<std::unique_ptr<BatchEngine>> Create(const LoadedModel& model,
                                                       EventCallback callback = nullptr,
                                                       EngineOptions options = {});
  // The same, throwing std::bad_alloc when the KV caches cannot be allocated and
  // std::invalid_argument when the options do not fit. Prefer Create.
  // (LoadedModel::Load has checked that the memory of the bounds is there.)
  explicit BatchEngine(const LoadedModel& model, EventCallback callback = nullptr,
                       EngineOptions options = {});
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  // The default speculative parameters, and a draft model that fits (CheckDraftModel); draft
  // speculation by default needs the draft model.
  static Status ValidateOptions(const LoadedModel& model, const EngineOptions& options);
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Validates everything (ValidateRequest) and queues the request. A rejected submit changes
  // nothing. Never waits for a running step.
  StatusOr<uint64_t> Submit(GenerationRequest request) VLS_EXCLUDES(mu_);
  // The same for a request already validated against this engine's model (ChatPipeline::Prepare
  // makes them): queued without validating it again. One validated for another model (or not
  // at all) is validated here in full.
  StatusOr<uint64_t> Submit(ValidatedRequest request) VLS_EXCLUDES(mu_);
  // Cancels a queued (buffers freed now) or admitted request (its slot is freed before the next
  // step computes anything) and delivers its cancelled event before returning. NotFound when
  // the id is unknown or already finished. Never waits for a running step.
  Status Cancel(uint64_t id) VLS_EXCLUDES(mu_);

  // Runs one engine step on the calling thread and delivers its events. Returns them.
  //
  // Failures stay with their requests: whatever a request's admission, prefill chunk, decode
  // row or sampling throws (out of memory included) finishes that request with an error event
  // and the others go on; anything thrown outside a request's work fails the requests in the
  // slots. No exception leaves a step.
  std::vector<TokenEvent> Step() VLS_EXCLUDES(step_mu_, mu_);
  // Admission and the whole prefill of every admitted request (their first tokens), without a
  // shared decode step, so tools and tests can look at the admitted slots.
  std::vector<TokenEvent> AdmitPending() VLS_EXCLUDES(step_mu_, mu_);
  // Steps until nothing is queued or active.
  void RunUntilIdle() VLS_EXCLUDES(step_mu_, mu_);

  // Runs steps on an engine thread until Stop() (or destruction). Events go to the callback,
  // or (an engine without a callback) to the queue read by WaitEvents. Throws
  // std::system_error when the thread cannot start (the engine is then not started).
  void Start() VLS_EXCLUDES(mu_);
  void Stop() VLS_EXCLUDES(mu_);
  // Moves out the events emitted so far, waiting up to `timeout_ms` for at least one.
  std::vector<TokenEvent> WaitEvents(int timeout_ms) VLS_EXCLUDES(mu_);

  bool Idle() const VLS_EXCLUDES(mu_);
  size_t pending_count() const VLS_EXCLUDES(mu_);
  size_t active_count() const VLS_EXCLUDES(mu_);  // admitted and not finished
  // Bytes owned by queued requests (memory accounting: cancel frees them).
  size_t pending_bytes() const VLS_EXCLUDES(mu_);
  EngineCounters counters() const VLS_EXCLUDES(mu_);
  const EngineOptions& options() const { return options_; }
  // The next decode coordinate of a request past its prefill (length + delta), for tests and
  // tools. Waits for a running step.
  std::optional<RopeCoord> NextCoordinate(uint64_t id) const VLS_EXCLUDES(step_mu_);
  // Which slot an admitted request occupies. Waits for a running step.
  std::optional<int> SlotOf(uint64_t id) const VLS_EXCLUDES(step_mu_);

 private:
  // A row's identity for prefix matching: two 64-bit hashes over what determines its K/V
  // (kind, token id or embedding bytes, RoPE coordinate, DeepStack feature rows).
  using RowKey = std::array<uint64_t, 2>;
  struct Pending {
    uint64_t id;
    GenerationRequest request;
    std::vector<RowKey> keys;  // PromptKeys(request), computed at Submit
  };
  // kPreempted: the slot's blocks were given back to the pool; it keeps its request, sampler,
  // grammar state and tokens, and waits to be resumed (its prompt and generated tokens
  // recomputed) before any new request is admitted.
  enum class Phase { kFree, kPrefill, kDecode, kPreempted };
  struct Slot {
    std::unique_ptr<Session> session;
    Phase phase = Phase::kFree;
    uint64_t id = 0;
    uint64_t admitted_seq = 0;  // admission order (prefill order, LRU among free slots)
    GenerationRequest request;  // the prompt until prefilled; then ids (penalties) and limits
    std::unique_ptr<Sampler> sampler;
    std::vector<int32_t> generated;
    int32_t next_token = -1;
    int64_t prompt_length = 0;  // S
    int64_t prefilled = 0;      // prompt rows in the cache
    int32_t cached = 0;         // prompt rows served from reuse
    // Most drafts of the next verify pass (adaptive, in [1, draft_tokens]): +2 after a pass
    // that accepted every draft, accepted + 1 after one that rejected one (docs/speculative.md).
    int draft_window = 0;
    // Keys of the rows the cache holds for the current or last occupant; rows [0,
    // kept.size()) are valid.
    std::vector<RowKey> kept;
    // The chained hashes of its first chain.size() blocks (full, committed rows of `kept`), each
    // named in the pool unless another block had the name first (the prefix cache).
    std::vector<uint64_t> chain;
    // Structured output (null without a grammar): the grammar state after the tokens generated
    // so far, and the mask of the next token ([MaskWords(V)], end tokens included), valid when
    // mask_ready. mask_error: computing it failed (the request ends with that error).
    std::unique_ptr<grammar::GrammarMatcher> matcher;
    std::vector<uint32_t> mask;
    bool mask_ready = false;
    std::string mask_error;
    uint64_t mask_ns = 0;  // time the last FillMask took (added to the counters by the step)
  };
  // The events of one step and the ids whose last event it produced.
  struct StepResult {
    std::vector<TokenEvent> events;
    std::vector<uint64_t> finished;
  };

  // The step's halves, under step_mu_.
  void ApplyCancels(StepResult* out) VLS_REQUIRES(step_mu_) VLS_EXCLUDES(mu_);
  void Admit(StepResult* out) VLS_REQUIRES(step_mu_) VLS_EXCLUDES(mu_);
  // Admits one request into a free slot (`free` is not empty).
  void AdmitOne(Pending& p, const std::vector<Slot*>& free) VLS_REQUIRES(step_mu_);
  // Fails every occupied slot with `error` (a throw outside any one request's work).
  void FailOccupied(const std::string& error, StepResult* out) VLS_REQUIRES(step_mu_);
  // Paged KV memory (batch_engine_memory.cc). Whether request `r` may be admitted now: the
  // pool's free blocks and those free slots hold cover its prompt (always without a small pool).
  bool RoomToAdmit(const GenerationRequest& r) const VLS_REQUIRES(step_mu_);
  // Whether a prompt (`keys`, S rows) should wait before it is admitted: a slot is prefilling a
  // prompt that shares more full blocks with it than the prefix cache holds now, and will name
  // them once computed (prompts that arrive together share their system prompt or image instead
  // of each computing it). Never with prefix reuse off.
  bool WaitsForPrefill(std::span<const RowKey> keys, int64_t S) const VLS_REQUIRES(step_mu_);
  // Resumes preempted slots, oldest admission first, while the pool has room for all their rows;
  // false while one still waits (nothing new is admitted then).
  bool ResumePreempted() VLS_REQUIRES(step_mu_);
  // Before a pass: the blocks its rows need (the chunks of ChooseChunks and the decode runs with
  // their largest drafts), made free by dropping free slots' kept rows (least recently admitted
  // first), then by preempting the most recently admitted sequences.
  void MakeRoom() VLS_REQUIRES(step_mu_);
  // Gives a slot's blocks back and leaves it waiting in kPreempted.
  void Preempt(Slot& slot) VLS_REQUIRES(step_mu_);
  // The prefix cache. The hash of a full block of rows `rows` after the blocks hashed `prev`.
  static uint64_t BlockHash(uint64_t prev, std::span<const RowKey> rows);
  // The blocks named in the pool that hold the prompt's first rows (`keys`, S rows; never its
  // last), and their hashes, in order.
  void CachedBlocks(std::span<const RowKey> keys, int64_t S, std::vector<int32_t>* ids,
                    std::vector<uint64_t>* hashes) const;
  // Names the slot's blocks that became full with committed rows since the last call.
  void NameBlocks(Slot& slot) VLS_REQUIRES(step_mu_);
  // Blocks free now plus those free slots hold.
  int64_t ReclaimableBlocks() const VLS_REQUIRES(step_mu_);
  // Rows of a decoding slot's next run before its drafts: its tokens not yet in the cache (1, or
  // the generated tokens a resumed slot recomputes, then the next token).
  int64_t RunRows(const Slot& slot) const;
  // This step's prefill chunks, in admission order within PrefillBudget: (slot, rows).
  std::vector<std::pair<Slot*, int64_t>> ChooseChunks(bool decoding) VLS_REQUIRES(step_mu_);
  void Fault(std::string_view point, uint64_t id) const;
  // Prefill chunks within `budget` rows (< 0: unlimited), each in a pass of its own.
  void PrefillSlots(int64_t budget, StepResult* out) VLS_REQUIRES(step_mu_);
  // The prefilling slots in admission order.
  std::vector<Slot*> PrefillOrder() VLS_REQUIRES(step_mu_);
  // Most prompt rows of one step's pass: while other streams decode, the option's bound per
  // prefilling slot (`prefilling` of them), else a whole prompt of the engine's capacity.
  int64_t PrefillBudget(bool decoding, int64_t prefilling) const;
  // A step's computation (batch_engine_step.cc): the chunks within PrefillBudget and every
  // decode row in one pass, then sampling.
  void RunPass(StepResult* out) VLS_REQUIRES(step_mu_);
  // The decode rows of a step: the slots past their prefill with a token to run, their drafts,
  // and the pass's arguments (Session::DecodeRuns).
  struct DecodePlan {
    std::vector<Slot*> rows;
    std::vector<int64_t> replays;  // per row: the recomputed rows before its next token
    std::vector<std::vector<int32_t>> drafts;
    std::vector<Session*> sessions;
    std::vector<int32_t> tokens, counts;
  };
  // Chooses the decode rows and their drafts (prompt lookup or the draft model, cut where a
  // grammar refuses them).
  DecodePlan PlanDecode() VLS_REQUIRES(step_mu_);
  // Verifies and emits every row of `plan` from the pass's logits [sum(counts), V].
  void AcceptDecode(const DecodePlan& plan, std::span<const float> logits, StepResult* out)
      VLS_REQUIRES(step_mu_);
  // Runs `plan` in a decode pass of its own (slot by slot when that fails) and emits.
  void DecodeAlone(const DecodePlan& plan, StepResult* out) VLS_REQUIRES(step_mu_);
  // After a chunk ran: the slot's prompt rows reach `end`; the chunk that ends the prompt
  // samples the first token from `logits` ([V]).
  void AfterChunk(Slot& slot, int64_t end, std::span<const float> logits, StepResult* out)
      VLS_REQUIRES(step_mu_);
  // The prompt-lookup draft of a decoding slot, at most `room` tokens (empty when it does not
  // speculate).
  std::vector<int32_t> Draft(const Slot& slot, int64_t room) const;
  // The speculative parameters that apply to a slot's request.
  const SpeculativeParams& SpecOf(const Slot& slot) const;
  // Most tokens a slot may draft this step (0: none), `room` rows of the pass left.
  int64_t DraftLimit(const Slot& slot, int64_t room) const;
  // The drafts of the slots that speculate from the draft model, in one set of draft passes.
  void ModelDrafts(std::span<Slot* const> rows, std::span<const int64_t> limits,
                   std::vector<std::vector<int32_t>>* drafts);
  int SlotIndex(const Slot& slot) const;
  // After a decode pass that ran slot's next token and `draft` as rows [0, n) (logits
  // [n, V]): verifies the drafts in order, emits the accepted ones and one more token, and
  // keeps the KV rows of the tokens that stay in the sequence.
  void AcceptRun(Slot& slot, std::span<const int32_t> draft, std::span<const float> logits,
                 StepResult* out) VLS_REQUIRES(step_mu_);
  void StepLocked(bool decode, StepResult* out) VLS_REQUIRES(step_mu_) VLS_EXCLUDES(mu_);
  // Runs the next chunk (at most `rows` rows) of a prefilling slot in a pass of its own (after
  // the fault hook when `fault`); a failure finishes it.
  void PrefillChunk(Slot& slot, int64_t rows, bool fault, StepResult* out) VLS_REQUIRES(step_mu_);
  std::vector<RowKey> PromptKeys(const GenerationRequest& r) const;
  static RowKey TokenKey(int32_t token, RopeCoord coord);
  // Frees a slot for the next request; its kept rows stay for reuse.
  void ReleaseSlot(Slot& slot) VLS_REQUIRES(step_mu_);
  // The error that ends a request whose logits row about to be sampled is not finite (the
  // sampler's kNonFiniteLogits): names the generation step (1-based: the token being sampled)
  // and the prompt length.
  static std::string NonFiniteLogitsError(const Slot& slot);
  // Samples and records a token; finishes the slot on EOS/stop id/length, or with an error on
  // non-finite logits.
  void EmitToken(Slot& slot, std::span<const float> logits, StepResult* out) VLS_REQUIRES(step_mu_);
  // Records `token` (sampled from `logits`); true when it finished the slot.
  bool RecordToken(Slot& slot, int32_t token, std::span<const float> logits, StepResult* out)
      VLS_REQUIRES(step_mu_);
  void FinishSlot(Slot& slot, FinishReason reason, const std::string& error, StepResult* out)
      VLS_REQUIRES(step_mu_);
  TokenEvent MakeEvent(const Slot& slot) const;
  // Structured output (batch_engine_grammar.cc). Whether `token` ends the slot's request (an
  // EOS id unless ignore_eos, or a stop id).
  bool IsEndToken(const Slot& slot, int32_t token) const;
  // Computes slot.mask for the matcher's state; never throws (a failure sets mask_error).
  // Touches only the slot's matcher and mask (the helper thread runs it).
  void FillMask(Slot& slot) const;
  // The mask for sampling the slot's next token (empty without a grammar), computed here when
  // not ready (the time counts as waited). False with *error set when there is none to be had:
  // the computation failed or the grammar allows no token.
  bool MaskFor(Slot& slot, std::span<const uint32_t>* mask, std::string* error)
      VLS_REQUIRES(step_mu_);
  // Cuts `draft` at its first token the slot's grammar refuses (and after an end token, or
  // where the grammar must end); the matcher is left as it was.
  void TruncateDraft(Slot& slot, std::vector<int32_t>* draft) const;
  // Starts the masks of `rows`' next tokens on a helper thread (they run while the decode pass
  // does) and lists the slots it computes in `started` (empty when no thread was started: the
  // masks are then computed when needed).
  void StartMasks(std::span<Slot* const> rows, std::thread* worker, std::vector<Slot*>* started)
      VLS_REQUIRES(step_mu_);
  // Waits for the helper thread (the wait counts as the masks' critical-path time).
  void JoinMasks(std::thread* worker, std::span<Slot* const> started) VLS_REQUIRES(step_mu_);
  // Takes the delivery lock, releases the step lock and delivers the step's events in order.
  std::vector<TokenEvent> DeliverStep(std::unique_lock<std::mutex> step_lock,
                                      const StepResult& result) VLS_EXCLUDES(mu_);
  // Delivers one event (to the callback, the WaitEvents queue and `delivered` when not null)
  // unless its request already finished; false when it was dropped. A callback that returns
  // false cancels the request. REQUIRES: deliver_mu_ held.
  bool DeliverOne(const TokenEvent& e, std::vector<TokenEvent>* delivered) VLS_EXCLUDES(mu_);
  // Cancel's body; the cancelled event also goes to `delivered` when not null. From a callback
  // that refused a token, a request that finished in the same step is cancelled all the same.
  Status CancelRequest(uint64_t id, std::vector<TokenEvent>* delivered, bool from_callback)
      VLS_EXCLUDES(mu_);
  bool IdleLocked() const VLS_REQUIRES(mu_);
  // The error text of an exception caught in a step (`what` names the work that threw).
  static std::string ErrorOf(const char* what, std::exception_ptr e);

  const LoadedModel& model_;
  EventCallback callback_;
  const EngineOptions options_;

  mutable std::mutex step_mu_;  // held for a step's computation
  std::vector<Slot> slots_ VLS_GUARDED_BY(step_mu_);
  uint64_t admit_seq_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t chunks_ VLS_GUARDED_BY(step_mu_) = 0;  // prefill chunks run
  uint64_t mixed_ VLS_GUARDED_BY(step_mu_) = 0;   // passes with chunks and decode rows
  uint64_t copied_prefixes_ VLS_GUARDED_BY(step_mu_) = 0;
  // Paged KV memory: the slots' shared pool, whether it is smaller than the slots at full
  // capacity (then sequences may be preempted, and slots keep their prompts to recompute them),
  // and what it has done.
  std::shared_ptr<KvPool> pool_;
  bool preemptible_ = false;
  uint64_t preemptions_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t evictions_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t shared_blocks_ VLS_GUARDED_BY(step_mu_) = 0;
  // Fewest rows worth copying from another slot beyond what the chosen slot already holds.
  static constexpr size_t kMinCopiedRows = 16;
  // Speculation so far (EngineCounters' fields of the same names).
  uint64_t verify_passes_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t drafted_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t accepted_ VLS_GUARDED_BY(step_mu_) = 0;
  // Token masks so far (EngineCounters' grammar_* fields).
  uint64_t masks_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t mask_ns_ VLS_GUARDED_BY(step_mu_) = 0;
  uint64_t mask_wait_ns_ VLS_GUARDED_BY(step_mu_) = 0;
  // Draft sessions, one per slot, when options_.draft_model is set.
  std::unique_ptr<ModelDrafter> drafter_ VLS_GUARDED_BY(step_mu_);

  // Delivery: one at a time, in step order; recursive so a callback may cancel.
  std::recursive_mutex deliver_mu_;
  std::unordered_set<uint64_t> delivered_final_;  // guarded by deliver_mu_
  int delivering_ = 0;                            // guarded by deliver_mu_: DeliverStep depth
  std::vector<uint64_t> forget_after_delivery_;   // guarded by deliver_mu_

  mutable std::mutex mu_;              // the queue: never held during computation or delivery
  std::condition_variable work_cv_;    // signalled on submit, cancel and stop
  std::condition_variable events_cv_;  // signalled when events are queued
  std::deque<Pending> pending_ VLS_GUARDED_BY(mu_);
  size_t pending_bytes_ VLS_GUARDED_BY(mu_) = 0;
  std::unordered_set<uint64_t> live_ VLS_GUARDED_BY(mu_);        // queued or admitted
  std::unordered_set<uint64_t> cancelling_ VLS_GUARDED_BY(mu_);  // admitted, cancel to apply
  uint64_t next_id_ VLS_GUARDED_BY(mu_) = 1;
  size_t admitted_ VLS_GUARDED_BY(mu_) = 0;
  EngineCounters counters_ VLS_GUARDED_BY(mu_);
  std::vector<TokenEvent> event_queue_ VLS_GUARDED_BY(mu_);
  bool threaded_ VLS_GUARDED_BY(mu_) = false;
  bool stopping_ VLS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_BATCH_ENGINE_H_
