#include "runtime/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>

#include "base/pool_pacer.h"
#include "kernels/dispatch.h"
#include "tokenizer/utf8.h"

namespace vls {
namespace {

// A 64-bit mix (splitmix64's finaliser) and a word-at-a-time hash over bytes built on it. Two
// seeds give the two halves of a row key; a collision of both would need 2^64 work.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t Combine(uint64_t h, uint64_t v) { return Mix(h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6))); }

uint64_t HashBytes(uint64_t seed, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = Mix(seed ^ n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, 8);
    h = Combine(h, w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  return Combine(h, tail);
}

constexpr uint64_t kSeeds[2] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull};
constexpr uint64_t kTokenRow = 1, kEmbeddingRow = 2;

}  // namespace

std::string BatchEngine::ErrorOf(const char* what, std::exception_ptr e) {
  try {
    std::rethrow_exception(std::move(e));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(what) + ": out of memory").ToString();
  } catch (const std::exception& x) {
    return Internal(std::string(what) + " failed: " + x.what()).ToString();
  } catch (...) {
    return Internal(std::string(what) + " failed").ToString();
  }
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<BatchEngine>> BatchEngine::Create(const LoadedModel& model,
                                                           EventCallback callback,
                                                           EngineOptions options) {
  VLS_RETURN_IF_ERROR(ValidateOptions(model, options));
  try {
    return std::make_unique<BatchEngine>(model, std::move(callback), std::move(options));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("batch engine: out of memory mapping a KV pool of " +
                             std::to_string(model.kv_pool_blocks()) + " blocks");
  }
}

BatchEngine::BatchEngine(const LoadedModel& model, EventCallback callback, EngineOptions options)
    : model_(model), callback_(std::move(callback)), options_(std::move(options)) {
  if (Status st = ValidateOptions(model, options_); !st.ok()) {
    throw std::invalid_argument(st.ToString());
  }
  // One pool for every slot (paged KV memory): a slot holds blocks for the rows it has written.
  StatusOr<std::shared_ptr<KvPool>> pool =
      KvPool::Create(model.model().kv_shape(), model.kv_block_keys(),
                     std::max<int64_t>(1, model.kv_pool_blocks()));
  if (!pool.ok()) throw std::bad_alloc();
  pool_ = std::move(*pool);
  const int slots = model.bounds().slots;
  preemptible_ = pool_->blocks() < pool_->BlocksFor(model.bounds().capacity) * slots;
  std::lock_guard<std::mutex> lock(step_mu_);
  slots_.resize(static_cast<size_t>(slots));
  for (Slot& s : slots_) s.session = std::make_unique<Session>(model, pool_);
  if (options_.draft_model != nullptr) {
    drafter_ = std::make_unique<ModelDrafter>(*options_.draft_model, model.bounds().slots);
  }
}

Status BatchEngine::ValidateOptions(const LoadedModel& model, const EngineOptions& options) {
  VLS_RETURN_IF_ERROR(ValidateSpeculativeParams(options.speculative));
  if (options.draft_model != nullptr) {
    VLS_RETURN_IF_ERROR(CheckDraftModel(model, *options.draft_model, model.bounds().slots));
  } else if (options.speculative.draft_tokens > 0 &&
             options.speculative.source == DraftSource::kModel) {
    return InvalidArgument("speculative: drafting from a model needs a draft model");
  }
  return Status::Ok();
}

void BatchEngine::Fault(std::string_view point, uint64_t id) const {
  if (options_.fault_hook_for_testing) options_.fault_hook_for_testing(point, id);
}

BatchEngine::~BatchEngine() { Stop(); }

// ---------------------------------------------------------------------------------------------
// Submission and cancellation: the queue only.

StatusOr<uint64_t> BatchEngine::Submit(GenerationRequest request) {
  // No engine state is read or changed before the request is queued.
  VLS_ASSIGN_OR_RETURN(ValidatedRequest checked,
                       ValidatedRequest::Validate(model_, std::move(request)));
  return Submit(std::move(checked));
}

StatusOr<uint64_t> BatchEngine::Submit(ValidatedRequest checked) {
  if (checked.model() != &model_) {
    return Submit(std::move(checked).Release());  // validated for another model, or not at all
  }
  GenerationRequest request = std::move(checked).Release();
  // Paged KV memory: a sequence that could never have its rows in the pool, even alone.
  const int64_t rows = request.positions.length + request.max_new_tokens;
  if (pool_->BlocksFor(rows) > pool_->blocks()) {
    return InvalidArgument(
        "the request needs up to " + std::to_string(rows) + " KV positions (a prompt of " +
        std::to_string(request.positions.length) + " and " +
        std::to_string(request.max_new_tokens) + " new tokens) but the engine's KV memory holds " +
        std::to_string(pool_->blocks() * pool_->block_keys()) +
        " (raise --kv-memory, or ask for fewer tokens)");
  }
  if (request.speculative && request.speculative->draft_tokens > 0 &&
      request.speculative->source == DraftSource::kModel && options_.draft_model == nullptr) {
    return InvalidArgument("speculative: this engine has no draft model to draft from");
  }
  // The prompt's row keys (hashing its embedding and feature rows) on the caller's thread.
  std::vector<RowKey> keys = PromptKeys(request);
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  pending_bytes_ += request.bytes();
  live_.insert(id);
  ++counters_.submitted;
  pending_.push_back({id, std::move(request), std::move(keys)});
  work_cv_.notify_all();
  return id;
}

Status BatchEngine::Cancel(uint64_t id) { return CancelRequest(id, nullptr, false); }

Status BatchEngine::CancelRequest(uint64_t id, std::vector<TokenEvent>* delivered,
                                  bool from_callback) {
  // The delivery lock first, so the cancelled event cannot overtake (or follow) a finish event
  // of the same request that a step is delivering.
  std::lock_guard<std::recursive_mutex> deliver(deliver_mu_);
  bool queued = false;
  {
    GenerationRequest freed;  // destroyed after the queue lock is released
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [id](const Pending& p) { return p.id == id; });
    if (it != pending_.end()) {
      pending_bytes_ -= it->request.bytes();
      freed = std::move(it->request);
      pending_.erase(it);
      live_.erase(id);
      queued = true;
    } else if (live_.erase(id) == 1) {
      cancelling_.insert(id);  // the next step frees the slot before it computes anything
      work_cv_.notify_all();
    } else if (!from_callback) {
      return NotFound("request " + std::to_string(id) + " is not queued or active");
    }
    // else: the request finished in the step being delivered, after the token its callback
    // refused; the cancelled event replaces that finish (dropped below, as already final).
  }
  // When no step runs, free the slot now. (With the delivery lock held and the step lock free,
  // no step holds undelivered events, so nothing of the request can be delivered after this.)
  StepResult applied;
  if (!queued) {
    std::unique_lock<std::mutex> step(step_mu_, std::try_to_lock);
    if (step.owns_lock()) ApplyCancels(&applied);
  }
  TokenEvent e;
  e.request_id = id;
  e.finish = FinishReason::kCancelled;
  DeliverOne(e, delivered);
  if (queued) delivered_final_.erase(id);  // a queued request has no other events to drop
  // Inside a delivery (a callback cancelling) the step being delivered may still hold events of
  // these requests: forget them once that delivery ends.
  for (uint64_t done : applied.finished) {
    if (delivering_ > 0) {
      forget_after_delivery_.push_back(done);
    } else {
      delivered_final_.erase(done);
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Delivery: after the step lock is released, in step order.

bool BatchEngine::DeliverOne(const TokenEvent& e, std::vector<TokenEvent>* delivered) {
  if (delivered_final_.count(e.request_id) != 0) return false;  // finished already
  if (e.finish != FinishReason::kNone) delivered_final_.insert(e.request_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.finish != FinishReason::kNone) ++counters_.finished;
    if (threaded_ && !callback_) {
      event_queue_.push_back(e);
      events_cv_.notify_all();
    }
  }
  if (delivered != nullptr) delivered->push_back(e);
  bool keep = true;
  if (callback_) {
    try {
      keep = callback_(e);
    } catch (...) {
      keep = true;  // a throwing callback must not take the engine down
    }
  }
  if (!keep && e.finish == FinishReason::kNone) (void)CancelRequest(e.request_id, delivered, true);
  return true;
}

std::vector<TokenEvent> BatchEngine::DeliverStep(std::unique_lock<std::mutex> step_lock,
                                                 const StepResult& result) {
  std::lock_guard<std::recursive_mutex> deliver(deliver_mu_);
  step_lock.unlock();
  std::vector<TokenEvent> delivered;
  ++delivering_;
  for (const TokenEvent& e : result.events) DeliverOne(e, &delivered);
  --delivering_;
  // Every event these requests will ever have is delivered or dropped now.
  for (uint64_t id : result.finished) delivered_final_.erase(id);
  for (uint64_t id : forget_after_delivery_) delivered_final_.erase(id);
  forget_after_delivery_.clear();
  return delivered;
}

// ---------------------------------------------------------------------------------------------
// Row keys for prefix reuse.

BatchEngine::RowKey BatchEngine::TokenKey(int32_t token, RopeCoord c) {
  RowKey k;
  for (int i = 0; i < 2; ++i) {
    uint64_t h = Combine(Mix(kSeeds[i]), kTokenRow);
    h = Combine(h, static_cast<uint32_t>(token));
    for (int32_t a : c) h = Combine(h, static_cast<uint32_t>(a));
    k[static_cast<size_t>(i)] = h;
  }
  return k;
}

uint64_t BatchEngine::BlockHash(uint64_t prev, std::span<const RowKey> rows) {
  const uint64_t h =
      Combine(Mix(prev ^ kSeeds[1]), HashBytes(kSeeds[0], rows.data(), rows.size_bytes()));
  return h == 0 ? 1 : h;  // 0 names nothing (KvPool)
}

std::vector<BatchEngine::RowKey> BatchEngine::PromptKeys(const GenerationRequest& r) const {
  const int64_t S = r.positions.length;
  std::vector<RowKey> keys(static_cast<size_t>(S));
  if (r.embeddings.empty()) {
    for (int64_t s = 0; s < S; ++s) {
      keys[static_cast<size_t>(s)] = TokenKey(r.tokens[static_cast<size_t>(s)], r.positions.At(s));
    }
    return keys;
  }
  const int64_t H = model_.config().hidden;
  const size_t row_bytes = static_cast<size_t>(H) * sizeof(float);
  std::span<const int32_t> visual;
  if (r.deepstack) visual = r.deepstack->positions();
  size_t v = 0;
  for (int64_t s = 0; s < S; ++s) {
    const RopeCoord c = r.positions.At(s);
    const float* row = r.embeddings.data() + s * H;
    const bool is_visual = v < visual.size() && visual[v] == s;
    for (int i = 0; i < 2; ++i) {
      uint64_t h = Combine(Mix(kSeeds[i]), kEmbeddingRow);
      h = Combine(h, HashBytes(kSeeds[i], row, row_bytes));
      for (int32_t a : c) h = Combine(h, static_cast<uint32_t>(a));
      if (is_visual) {
        for (int64_t k = 0; k < r.deepstack->num_layers(); ++k) {
          const float* f = r.deepstack->features(k) + static_cast<int64_t>(v) * H;
          h = Combine(h, HashBytes(kSeeds[i] + static_cast<uint64_t>(k) + 1, f, row_bytes));
        }
      }
      keys[static_cast<size_t>(s)][static_cast<size_t>(i)] = h;
    }
    if (is_visual) ++v;
  }
  return keys;
}

// ---------------------------------------------------------------------------------------------
// The step.

TokenEvent BatchEngine::MakeEvent(const Slot& slot) const {
  TokenEvent e;
  e.request_id = slot.id;
  e.prompt_tokens = static_cast<int32_t>(slot.prompt_length);
  e.cached_tokens = slot.cached;
  e.generated_tokens = static_cast<int32_t>(slot.generated.size());
  return e;
}

void BatchEngine::ReleaseSlot(Slot& slot) {
  slot.phase = Phase::kFree;
  slot.request = GenerationRequest();
  slot.sampler.reset();
  slot.generated.clear();
  slot.next_token = -1;
  slot.matcher.reset();
  slot.mask_ready = false;
  slot.mask_error.clear();
  if (drafter_) drafter_->Forget(SlotIndex(slot));
  // `kept` and the session's valid rows stay: the next request may reuse them.
}

void BatchEngine::FinishSlot(Slot& slot, FinishReason reason, const std::string& error,
                             StepResult* out) {
  TokenEvent e = MakeEvent(slot);
  e.finish = reason;
  e.error = tok::SanitizeUtf8(error);  // it may quote input or an exception's bytes
  out->events.push_back(std::move(e));
  out->finished.push_back(slot.id);
  ReleaseSlot(slot);
}

std::string BatchEngine::NonFiniteLogitsError(const Slot& slot) {
  return Internal("the model produced non-finite logits (NaN or infinity) at generation step " +
                  std::to_string(slot.generated.size() + 1) + " (prompt of " +
                  std::to_string(slot.prompt_length) + " tokens)")
      .ToString();
}

void BatchEngine::EmitToken(Slot& slot, std::span<const float> logits, StepResult* out) {
  Fault("sample", slot.id);
  if (slot.matcher && slot.matcher->MustEnd()) {  // a grammar of the empty reply only
    FinishSlot(slot, FinishReason::kStop, "", out);
    return;
  }
  std::span<const uint32_t> mask;
  std::string mask_error;
  if (!MaskFor(slot, &mask, &mask_error)) {
    FinishSlot(slot, FinishReason::kError, mask_error, out);
    return;
  }
  const int32_t token = slot.sampler->Sample(logits, slot.request.tokens, slot.generated, mask);
  if (token == kNonFiniteLogits) {
    FinishSlot(slot, FinishReason::kError, NonFiniteLogitsError(slot), out);
    return;
  }
  RecordToken(slot, token, logits, out);
}

bool BatchEngine::RecordToken(Slot& slot, int32_t token, std::span<const float> logits,
                              StepResult* out) {
  // Structured output: the token moves the grammar on (an end token does not: it ends).
  bool grammar_done = false;
  if (slot.matcher && !IsEndToken(slot, token)) {
    slot.mask_ready = false;
    if (!slot.matcher->AcceptToken(token)) {  // the mask allowed it: a bug, never a reply
      FinishSlot(
          slot, FinishReason::kError,
          Internal("structured output: the grammar refused sampled token " + std::to_string(token))
              .ToString(),
          out);
      return true;
    }
    grammar_done = slot.matcher->MustEnd();
  }
  slot.generated.push_back(token);
  TokenEvent e = MakeEvent(slot);
  e.token = token;
  if (slot.request.logprobs >= 0) {
    std::vector<std::pair<int32_t, float>> top;
    e.logprob = static_cast<float>(LogProb(logits, token, slot.request.logprobs, &top));
    for (const auto& [t, lp] : top) e.top_logprobs.push_back({t, lp});
  }
  if (IsEndToken(slot, token)) {
    e.finish = FinishReason::kStop;  // EOS and stop ids win over the length limit
  } else if (static_cast<int>(slot.generated.size()) >= slot.request.max_new_tokens) {
    e.finish = FinishReason::kLength;
  }
  if (grammar_done) {
    // The grammar admits nothing more. The token is content, not an end token: it goes out
    // as an ordinary event and a finish event without a token follows (a "stop" event with a
    // token always names the EOS or stop id that ended the request, which TextStream hides).
    e.finish = FinishReason::kNone;
    out->events.push_back(std::move(e));
    TokenEvent f = MakeEvent(slot);
    f.finish = FinishReason::kStop;
    out->events.push_back(std::move(f));
    out->finished.push_back(slot.id);
    ReleaseSlot(slot);
    return true;
  }
  const bool done = e.finish != FinishReason::kNone;
  out->events.push_back(std::move(e));
  if (done) {
    out->finished.push_back(slot.id);
    ReleaseSlot(slot);
    return true;
  }
  slot.next_token = token;
  return false;
}

void BatchEngine::ApplyCancels(StepResult* out) {
  std::unordered_set<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids.swap(cancelling_);
  }
  for (Slot& slot : slots_) {
    if (slot.phase != Phase::kFree && ids.count(slot.id) != 0) ReleaseSlot(slot);
  }
  out->finished.insert(out->finished.end(), ids.begin(), ids.end());
}

void BatchEngine::Admit(StepResult* out) {
  if (!ResumePreempted()) return;
  while (true) {
    std::vector<Slot*> free;
    for (Slot& s : slots_) {
      if (s.phase == Phase::kFree) free.push_back(&s);
    }
    if (free.empty()) return;
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty() || !RoomToAdmit(pending_.front().request)) return;
      // In order: what arrives after a waiting prompt waits behind it (a step or a few).
      const Pending& front = pending_.front();
      if (WaitsForPrefill(front.keys, front.request.positions.length)) return;
      p = std::move(pending_.front());
      pending_.pop_front();
      pending_bytes_ -= p.request.bytes();
    }
    try {
      AdmitOne(p, free);
    } catch (...) {
      // The request fails alone; a slot it was put in is free again.
      const std::string error = ErrorOf("admission", std::current_exception());
      for (Slot& s : slots_) {
        if (s.phase != Phase::kFree && s.id == p.id) {
          FinishSlot(s, FinishReason::kError, error, out);
          return;
        }
      }
      TokenEvent e;
      e.request_id = p.id;
      e.finish = FinishReason::kError;
      e.error = tok::SanitizeUtf8(error);
      e.prompt_tokens = static_cast<int32_t>(p.request.positions.length);
      out->events.push_back(std::move(e));
      out->finished.push_back(p.id);
    }
  }
}

void BatchEngine::AdmitOne(Pending& p, const std::vector<Slot*>& free) {
  Fault("admit", p.id);
  std::vector<RowKey> keys = std::move(p.keys);
  // The free slot whose valid rows share the longest prefix with the prompt, counted only when
  // the prompt keeps at least half of what the slot holds; otherwise the slot holds another
  // conversation, and taking it for the few rows they share (a chat template's first tokens)
  // would throw that conversation's cache away while an empty or older slot is free. Among
  // equals the least recently admitted one, so a slot holding a useful prefix is kept longest.
  // The slot chosen reuses whatever prefix it shares.
  Slot* best = nullptr;
  size_t best_match = 0, best_score = 0;
  for (Slot* s : free) {
    size_t match = 0;
    if (options_.prefix_reuse) {
      const size_t valid = std::min(s->kept.size(), static_cast<size_t>(s->session->valid_rows()));
      const size_t n = std::min(valid, keys.size());
      while (match < n && s->kept[match] == keys[match]) ++match;
      const size_t score = 2 * match >= valid ? match : 0;
      if (best == nullptr || score > best_score ||
          (score == best_score && s->admitted_seq < best->admitted_seq)) {
        best = s;
        best_match = match;
        best_score = score;
      }
    } else if (best == nullptr || s->admitted_seq < best->admitted_seq) {
      best = s;
    }
  }
  // Any other slot, running or free, may hold a longer prefix of the prompt (a system prompt or
  // an image another conversation sent, or this conversation's earlier turn in a slot taken
  // since): its rows are copied into the chosen slot below instead of being prefilled again.
  Slot* source = nullptr;
  size_t source_match = 0;
  if (options_.prefix_reuse) {
    for (Slot& o : slots_) {
      if (&o == best) continue;
      const size_t valid = std::min(o.kept.size(), static_cast<size_t>(o.session->valid_rows()));
      const size_t n = std::min(valid, keys.size());
      size_t match = 0;
      while (match < n && o.kept[match] == keys[match]) ++match;
      if (match > source_match) {
        source = &o;
        source_match = match;
      }
    }
    if (source_match < best_match + kMinCopiedRows) source = nullptr;
  }
  Slot& slot = *best;
  const int64_t S = p.request.positions.length;
  // The prefix cache: the prompt's full blocks (never its last row, whose logits are needed)
  // named in the pool by another sequence, running or gone.
  std::vector<int32_t> shared;
  std::vector<uint64_t> hashes;
  if (options_.prefix_reuse) CachedBlocks(keys, S, &shared, &hashes);
  const auto pooled = static_cast<size_t>(shared.size()) * static_cast<size_t>(pool_->block_keys());
  // Shared blocks win unless a copy from another slot gives at least a block more.
  const bool adopt =
      pooled > best_match &&
      (source == nullptr || pooled + static_cast<size_t>(pool_->block_keys()) > source_match);
  if (adopt) source = nullptr;
  // At least the last row is computed: its logits give the first token.
  auto sampler = std::make_unique<Sampler>(p.request.sampling, p.id);
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  std::vector<uint32_t> mask;
  if (p.request.grammar) {
    matcher = std::make_unique<grammar::GrammarMatcher>(p.request.grammar);
    mask.assign(grammar::MaskWords(model_.config().vocab), 0u);
  }
  // Nothing below throws: the slot changes only once everything it needs is allocated.
  int64_t cached = std::min<int64_t>(static_cast<int64_t>(best_match), S - 1);
  const int64_t P = pool_->block_keys();
  if (adopt) {
    cached = 0;
    slot.chain.clear();
    if (slot.session->AdoptPrefix(shared, hashes)) {
      cached = static_cast<int64_t>(pooled);
      slot.chain = hashes;
      shared_blocks_ += shared.size();
    }
  } else if (source != nullptr) {
    const int64_t rows = std::min<int64_t>(static_cast<int64_t>(source_match), S - 1);
    cached = 0;
    slot.chain.clear();
    if (slot.session->CopyPrefixFrom(*source->session, rows)) {
      cached = rows;
      ++copied_prefixes_;
    }
  } else {
    // Its own kept rows: the prompt goes on writing from `cached`, so a named (shared) block
    // there is given up instead (a block is never written once named).
    if (cached % P != 0 && cached / P < slot.session->kv_blocks() &&
        slot.session->KvBlockNamed(cached / P)) {
      cached -= cached % P;
    }
    slot.chain.resize(std::min(slot.chain.size(), static_cast<size_t>(cached / P)));
  }
  slot.session->Truncate(cached);
  cached = slot.session->valid_rows();
  slot.kept = std::move(keys);
  slot.phase = Phase::kPrefill;
  slot.id = p.id;
  slot.admitted_seq = ++admit_seq_;
  slot.prompt_length = S;
  slot.prefilled = cached;
  slot.cached = static_cast<int32_t>(cached);
  slot.sampler = std::move(sampler);
  slot.matcher = std::move(matcher);
  slot.mask.swap(mask);
  slot.mask_ready = false;
  slot.mask_error.clear();
  slot.generated.clear();
  slot.next_token = -1;
  slot.request = std::move(p.request);
  slot.draft_window = SpecOf(slot).draft_tokens;
}

void BatchEngine::FailOccupied(const std::string& error, StepResult* out) {
  for (Slot& s : slots_) {
    if (s.phase != Phase::kFree) FinishSlot(s, FinishReason::kError, error, out);
  }
}

void BatchEngine::StepLocked(bool decode, StepResult* out) {
  const uint64_t preempted_before = preemptions_, evicted_before = evictions_,
                 shared_before = shared_blocks_;
  const uint64_t chunks_before = chunks_, mixed_before = mixed_, copied_before = copied_prefixes_,
                 verify_before = verify_passes_, drafted_before = drafted_,
                 accepted_before = accepted_, masks_before = masks_, mask_ns_before = mask_ns_,
                 mask_wait_before = mask_wait_ns_;
  try {
    ApplyCancels(out);
    Admit(out);
    if (decode) {
      RunPass(out);
    } else {
      PrefillSlots(-1, out);
    }
    for (Slot& s : slots_) NameBlocks(s);
  } catch (...) {
    // Thrown outside any one request's work (each catches its own): the slots' requests fail,
    // the queued ones and the engine go on.
    const std::string error = ErrorOf("engine step", std::current_exception());
    try {
      FailOccupied(error, out);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory even for the error events
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : out->finished) live_.erase(id);
  ++counters_.steps;
  counters_.prefill_chunks += chunks_ - chunks_before;
  counters_.mixed_passes += mixed_ - mixed_before;
  counters_.copied_prefixes += copied_prefixes_ - copied_before;
  counters_.shared_prefix_blocks += shared_blocks_ - shared_before;
  counters_.kv_blocks_cached = static_cast<uint64_t>(pool_->cached_blocks());
  counters_.preemptions += preemptions_ - preempted_before;
  counters_.evictions += evictions_ - evicted_before;
  counters_.kv_blocks = static_cast<uint64_t>(pool_->blocks());
  counters_.kv_blocks_used = static_cast<uint64_t>(pool_->blocks() - pool_->free_blocks());
  counters_.verify_passes += verify_passes_ - verify_before;
  counters_.draft_tokens += drafted_ - drafted_before;
  counters_.accepted_draft_tokens += accepted_ - accepted_before;
  counters_.grammar_masks += masks_ - masks_before;
  counters_.grammar_mask_ns += mask_ns_ - mask_ns_before;
  counters_.grammar_mask_wait_ns += mask_wait_ns_ - mask_wait_before;
  for (const TokenEvent& e : out->events) {
    if (e.token < 0) continue;
    ++counters_.generated_tokens;
    if (e.generated_tokens == 1) {
      counters_.prompt_tokens += static_cast<uint64_t>(e.prompt_tokens);
      counters_.cached_tokens += static_cast<uint64_t>(e.cached_tokens);
    }
  }
}

std::vector<TokenEvent> BatchEngine::Step() {
  std::unique_lock<std::mutex> step_lock(step_mu_);
  StepResult result;
  StepLocked(true, &result);
  return DeliverStep(std::move(step_lock), result);
}

std::vector<TokenEvent> BatchEngine::AdmitPending() {
  std::unique_lock<std::mutex> step_lock(step_mu_);
  StepResult result;
  StepLocked(false, &result);
  return DeliverStep(std::move(step_lock), result);
}

bool BatchEngine::IdleLocked() const { return live_.empty() && cancelling_.empty(); }

void BatchEngine::RunUntilIdle() {
  while (!Idle()) Step();
}

void BatchEngine::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (threaded_) return;
  threaded_ = true;
  stopping_ = false;
  thread_ = std::thread([this] {
    // The steps are the pool's foreground: image encoding waits for windows between them
    // (LoadedModel::pacer) while requests run, and runs freely while the engine waits.
    PoolPacer::Foreground pace(model_.pacer());
    while (true) {
      bool idle = false;
      {
        std::lock_guard<std::mutex> idle_lock(mu_);
        idle = IdleLocked();
      }
      if (idle) pace.Idle();
      {
        std::unique_lock<std::mutex> wait_lock(mu_);
        work_cv_.wait(wait_lock, [this] { return stopping_ || !IdleLocked(); });
        if (stopping_) return;
      }
      pace.BeginStep();
      try {
        Step();
      } catch (...) {  // NOLINT(bugprone-empty-catch): Step fails requests, never the thread
      }
      pace.EndStep();
    }
  });
}

void BatchEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!threaded_) return;
    stopping_ = true;
    work_cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  threaded_ = false;
  events_cv_.notify_all();
}

std::vector<TokenEvent> BatchEngine::WaitEvents(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  events_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [this] { return !event_queue_.empty() || stopping_; });
  std::vector<TokenEvent> out;
  out.swap(event_queue_);
  return out;
}

bool BatchEngine::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return IdleLocked();
}

size_t BatchEngine::pending_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

size_t BatchEngine::active_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size() - pending_.size();
}

size_t BatchEngine::pending_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_bytes_;
}

EngineCounters BatchEngine::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

std::optional<RopeCoord> BatchEngine::NextCoordinate(uint64_t id) const {
  std::lock_guard<std::mutex> lock(step_mu_);
  for (const Slot& s : slots_) {
    if (s.phase == Phase::kDecode && s.id == id) {
      auto c = DecodeCoordinate(s.session->length(), s.session->rope_delta());
      if (c.ok()) return *c;
    }
  }
  return std::nullopt;
}

std::optional<int> BatchEngine::SlotOf(uint64_t id) const {
  std::lock_guard<std::mutex> lock(step_mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].phase != Phase::kFree && slots_[i].id == id) return static_cast<int>(i);
  }
  return std::nullopt;
}

}  // namespace vls
