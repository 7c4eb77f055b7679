#include "runtime/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>

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

// The error text of an exception caught in a step (`what` names the work that threw).
std::string ErrorOf(const char* what, std::exception_ptr e) {
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

}  // namespace

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
    const StaticBounds& b = model.bounds();
    return ResourceExhausted("batch engine: out of memory allocating the KV caches of " +
                             std::to_string(b.slots) + " slot(s) of capacity " +
                             std::to_string(b.capacity));
  }
}

BatchEngine::BatchEngine(const LoadedModel& model, EventCallback callback, EngineOptions options)
    : model_(model), callback_(std::move(callback)), options_(std::move(options)) {
  if (Status st = ValidateOptions(model, options_); !st.ok()) {
    throw std::invalid_argument(st.ToString());
  }
  std::lock_guard<std::mutex> lock(step_mu_);
  slots_.resize(static_cast<size_t>(model.bounds().slots));
  for (Slot& s : slots_) s.session = std::make_unique<Session>(model);
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
  VLS_RETURN_IF_ERROR(ValidateRequest(model_, request));  // no engine state is read or changed
  if (request.speculative && request.speculative->draft_tokens > 0 &&
      request.speculative->source == DraftSource::kModel && options_.draft_model == nullptr) {
    return InvalidArgument("speculative: this engine has no draft model to draft from");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  pending_bytes_ += request.bytes();
  live_.insert(id);
  ++counters_.submitted;
  pending_.push_back({id, std::move(request)});
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

void BatchEngine::EmitToken(Slot& slot, std::span<const float> logits, StepResult* out) {
  Fault("sample", slot.id);
  const int32_t token = slot.sampler->Sample(logits, slot.request.tokens, slot.generated);
  RecordToken(slot, token, logits, out);
}

bool BatchEngine::RecordToken(Slot& slot, int32_t token, std::span<const float> logits,
                              StepResult* out) {
  slot.generated.push_back(token);
  TokenEvent e = MakeEvent(slot);
  e.token = token;
  if (slot.request.logprobs >= 0) {
    std::vector<std::pair<int32_t, float>> top;
    e.logprob = static_cast<float>(LogProb(logits, token, slot.request.logprobs, &top));
    for (const auto& [t, lp] : top) e.top_logprobs.push_back({t, lp});
  }
  const auto& eos = model_.config().eos_token_ids;
  const auto& stop = slot.request.stop_token_ids;
  if ((!slot.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) ||
      std::find(stop.begin(), stop.end(), token) != stop.end()) {
    e.finish = FinishReason::kStop;  // EOS and stop ids win over the length limit
  } else if (static_cast<int>(slot.generated.size()) >= slot.request.max_new_tokens) {
    e.finish = FinishReason::kLength;
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
  while (true) {
    std::vector<Slot*> free;
    for (Slot& s : slots_) {
      if (s.phase == Phase::kFree) free.push_back(&s);
    }
    if (free.empty()) return;
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return;
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
  std::vector<RowKey> keys = PromptKeys(p.request);
  // The free slot whose valid rows share the longest prefix; among equals the least recently
  // admitted one, so a slot holding a useful prefix is kept for longest.
  Slot* best = nullptr;
  size_t best_match = 0;
  for (Slot* s : free) {
    size_t match = 0;
    if (options_.prefix_reuse) {
      const size_t valid = std::min(s->kept.size(), static_cast<size_t>(s->session->valid_rows()));
      const size_t n = std::min(valid, keys.size());
      while (match < n && s->kept[match] == keys[match]) ++match;
    }
    if (best == nullptr || match > best_match ||
        (match == best_match && s->admitted_seq < best->admitted_seq)) {
      best = s;
      best_match = match;
    }
  }
  Slot& slot = *best;
  const int64_t S = p.request.positions.length;
  // At least the last row is computed: its logits give the first token.
  const int64_t cached = std::min<int64_t>(static_cast<int64_t>(best_match), S - 1);
  auto sampler = std::make_unique<Sampler>(p.request.sampling, p.id);
  // Nothing below throws: the slot changes only once everything it needs is allocated.
  slot.session->Truncate(cached);
  slot.kept = std::move(keys);
  slot.phase = Phase::kPrefill;
  slot.id = p.id;
  slot.admitted_seq = ++admit_seq_;
  slot.prompt_length = S;
  slot.prefilled = cached;
  slot.cached = static_cast<int32_t>(cached);
  slot.sampler = std::move(sampler);
  slot.generated.clear();
  slot.next_token = -1;
  slot.request = std::move(p.request);
  slot.draft_window = SpecOf(slot).draft_tokens;
}

void BatchEngine::PrefillChunk(Slot& slot, int64_t rows, StepResult* out) {
  const int64_t S = slot.prompt_length;
  const int64_t begin = slot.prefilled, end = std::min(S, begin + rows);
  const bool last = end == S;
  std::vector<float> logits;
  std::string error;
  try {
    Fault("prefill", slot.id);
    const Status st = slot.session->PrefillRange(slot.request.prompt(), begin, end, last, &logits);
    if (!st.ok()) error = st.ToString();
  } catch (...) {
    error = ErrorOf("prefill", std::current_exception());
  }
  ++chunks_;
  if (!error.empty()) {
    FinishSlot(slot, FinishReason::kError, error, out);
    return;
  }
  slot.prefilled = end;
  if (!last) return;
  slot.phase = Phase::kDecode;
  if (drafter_) {
    const SpeculativeParams& sp = SpecOf(slot);
    const int index = SlotIndex(slot);
    try {
      if (sp.draft_tokens > 0 && sp.source == DraftSource::kModel) {
        // A prompt the draft model cannot take leaves the slot without drafts.
        (void)drafter_->Begin(index, slot.request.prompt());
      } else {
        drafter_->Forget(index);
      }
    } catch (...) {  // out of memory in the draft model: decode without drafts
      drafter_->Forget(index);
    }
  }
  // The slot keeps the prompt ids (penalties) and the limits; never the embeddings or the
  // DeepStack payload.
  slot.request.embeddings = std::vector<float>();
  slot.request.deepstack.reset();
  slot.request.positions = PositionIds();
  try {
    EmitToken(slot, logits, out);
  } catch (...) {
    FinishSlot(slot, FinishReason::kError, ErrorOf("sampling", std::current_exception()), out);
  }
}

void BatchEngine::PrefillSlots(int64_t budget, StepResult* out) {
  std::vector<Slot*> order;
  for (Slot& s : slots_) {
    if (s.phase == Phase::kPrefill) order.push_back(&s);
  }
  std::sort(order.begin(), order.end(),
            [](const Slot* a, const Slot* b) { return a->admitted_seq < b->admitted_seq; });
  for (Slot* s : order) {
    if (budget == 0) return;
    const int64_t remaining = s->prompt_length - s->prefilled;
    const int64_t rows = budget < 0 ? remaining : std::min(remaining, budget);
    PrefillChunk(*s, rows, out);
    if (budget > 0) budget -= rows;
  }
}

const SpeculativeParams& BatchEngine::SpecOf(const Slot& slot) const {
  return slot.request.speculative ? *slot.request.speculative : options_.speculative;
}

int BatchEngine::SlotIndex(const Slot& slot) const {
  return static_cast<int>(&slot - slots_.data());
}

int64_t BatchEngine::DraftLimit(const Slot& slot, int64_t room) const {
  const SpeculativeParams& sp = SpecOf(slot);
  // A pass emits at most drafts + 1 tokens and writes drafts + 1 KV rows: never draft past the
  // request's token limit or the slot's capacity.
  const int64_t tokens_left =
      slot.request.max_new_tokens - static_cast<int64_t>(slot.generated.size()) - 1;
  const int64_t rows_left = slot.session->capacity() - slot.session->length() - 1;
  int64_t limit = std::min({static_cast<int64_t>(std::min(sp.draft_tokens, slot.draft_window)),
                            tokens_left, rows_left, room});
  if (sp.source == DraftSource::kModel) {
    limit = drafter_ ? std::min(limit, drafter_->Room(SlotIndex(slot), slot.session->length())) : 0;
  }
  return std::max<int64_t>(limit, 0);
}

std::vector<int32_t> BatchEngine::Draft(const Slot& slot, int64_t limit) const {
  if (limit <= 0) return {};
  return DraftNgram(slot.request.tokens, slot.generated, SpecOf(slot), static_cast<int>(limit));
}

void BatchEngine::ModelDrafts(std::span<Slot* const> rows, std::span<const int64_t> limits,
                              std::vector<std::vector<int32_t>>* drafts) {
  std::vector<ModelDrafter::Job> jobs;
  std::vector<size_t> which;
  for (size_t b = 0; b < rows.size(); ++b) {
    const Slot& s = *rows[b];
    if (limits[b] <= 0 || SpecOf(s).source != DraftSource::kModel) continue;
    jobs.push_back({SlotIndex(s), s.request.tokens, s.generated, static_cast<int>(limits[b])});
    which.push_back(b);
  }
  if (jobs.empty() || !drafter_) return;
  std::vector<std::vector<int32_t>> got;
  try {
    drafter_->Draft(jobs, &got);
  } catch (...) {  // out of memory drafting: these slots decode plainly this step
    for (const ModelDrafter::Job& j : jobs) drafter_->Forget(j.slot);
    return;
  }
  for (size_t i = 0; i < which.size(); ++i) (*drafts)[which[i]] = std::move(got[i]);
}

void BatchEngine::AcceptRun(Slot& slot, std::span<const int32_t> draft,
                            std::span<const float> logits, StepResult* out) {
  const size_t V = static_cast<size_t>(model_.config().vocab);
  const uint64_t id = slot.id;
  const int32_t fed = slot.next_token;
  const int base = slot.session->length() - static_cast<int>(draft.size()) - 1;  // fed's row
  // Row j's logits decide token j of this pass. While token j is draft[j] the pass's row j + 1
  // (fed draft[j]) computed the right next distribution; the first other token ends the run.
  // Emitting stops early at a finish (EOS, stop id, length): nothing past it is emitted.
  size_t accepted = 0;
  std::string error;
  try {
    for (size_t j = 0; j <= draft.size(); ++j) {
      const std::span<const float> row = logits.subspan(j * V, V);
      Fault("sample", id);
      bool ok = false;
      const int32_t token =
          j < draft.size()
              ? slot.sampler->Verify(row, slot.request.tokens, slot.generated, draft[j], &ok)
              : slot.sampler->Sample(row, slot.request.tokens, slot.generated);
      if (ok) ++accepted;
      if (RecordToken(slot, token, row, out) || !ok) break;
    }
  } catch (...) {
    error = ErrorOf("sampling", std::current_exception());
  }
  if (!draft.empty()) {
    ++verify_passes_;
    // Draft more while every draft is accepted; after a rejection, one more than were accepted:
    // a run of rejections (free text) costs one drafted row per pass, a run of acceptances keeps
    // the full window. (A pass cut short by a finish or a stop leaves the window as it is.)
    const int most = SpecOf(slot).draft_tokens;
    if (accepted == draft.size()) {
      slot.draft_window = std::min(most, slot.draft_window + 2);
    } else if (slot.phase == Phase::kDecode && slot.id == id) {
      slot.draft_window = static_cast<int>(accepted) + 1;
    }
  }
  drafted_ += draft.size();
  accepted_ += accepted;
  // The sequence keeps the rows of `fed` and the accepted drafts; the rejected drafts' rows go.
  slot.kept.resize(static_cast<size_t>(base));
  for (size_t i = 0; i <= accepted; ++i) {
    const int index = base + static_cast<int>(i);
    slot.kept.push_back(TokenKey(i == 0 ? fed : draft[i - 1],
                                 *DecodeCoordinate(index, slot.session->rope_delta())));
  }
  slot.session->Rewind(base + 1 + static_cast<int>(accepted));
  if (drafter_) drafter_->Keep(SlotIndex(slot), slot.session->length());
  if (!error.empty() && slot.phase != Phase::kFree && slot.id == id) {
    FinishSlot(slot, FinishReason::kError, error, out);
  }
}

void BatchEngine::DecodeActive(StepResult* out) {
  std::vector<Slot*> rows;
  for (Slot& s : slots_) {
    if (s.phase == Phase::kDecode && s.next_token >= 0) rows.push_back(&s);
  }
  if (rows.empty()) return;
  // Drafts fill the pass up to the rows a plain step could have run through the same matmul
  // kernels (from kOneDnnMinRows rows BF16 products change kernel, and greedy speculation
  // must give the plain tokens bit for bit).
  int64_t room =
      std::max<int64_t>(0, kernels::kOneDnnMinRows - 1 - static_cast<int64_t>(rows.size()));
  std::vector<std::vector<int32_t>> drafts(rows.size());
  std::vector<int64_t> limits(rows.size(), 0);
  for (size_t b = 0; b < rows.size(); ++b) {
    Slot& s = *rows[b];
    limits[b] = DraftLimit(s, room);
    if (SpecOf(s).source == DraftSource::kNgram) {
      try {
        drafts[b] = Draft(s, limits[b]);
      } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory drafting: decode plainly
      }
      limits[b] = static_cast<int64_t>(drafts[b].size());
    }
    room -= limits[b];
  }
  ModelDrafts(rows, limits, &drafts);
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens, counts;
  for (size_t b = 0; b < rows.size(); ++b) {
    Slot& s = *rows[b];
    sessions.push_back(s.session.get());
    tokens.push_back(s.next_token);
    tokens.insert(tokens.end(), drafts[b].begin(), drafts[b].end());
    counts.push_back(static_cast<int32_t>(drafts[b].size() + 1));
  }
  const size_t V = static_cast<size_t>(model_.config().vocab);
  std::vector<float> logits;
  Status st = Session::DecodeRuns(sessions, tokens, counts, &logits);
  if (st.ok()) {
    size_t row = 0;
    for (size_t b = 0; b < rows.size(); ++b) {
      const size_t n = static_cast<size_t>(counts[b]);
      AcceptRun(*rows[b], drafts[b], std::span<const float>(logits.data() + row * V, n * V), out);
      row += n;
    }
    return;
  }
  // Isolate the failure: decode slot by slot so one bad row cannot fail the others.
  for (size_t b = 0; b < rows.size(); ++b) {
    Session* one_session = sessions[b];
    std::vector<int32_t> run{rows[b]->next_token};
    run.insert(run.end(), drafts[b].begin(), drafts[b].end());
    std::vector<float> one;
    const Status rs = Session::DecodeRuns(std::span<Session* const>(&one_session, 1), run,
                                          std::span<const int32_t>(&counts[b], 1), &one);
    if (!rs.ok()) {
      FinishSlot(*rows[b], FinishReason::kError, rs.ToString(), out);
      continue;
    }
    AcceptRun(*rows[b], drafts[b], one, out);
  }
}

void BatchEngine::FailOccupied(const std::string& error, StepResult* out) {
  for (Slot& s : slots_) {
    if (s.phase != Phase::kFree) FinishSlot(s, FinishReason::kError, error, out);
  }
}

void BatchEngine::StepLocked(bool decode, StepResult* out) {
  const uint64_t chunks_before = chunks_, verify_before = verify_passes_, drafted_before = drafted_,
                 accepted_before = accepted_;
  try {
    ApplyCancels(out);
    Admit(out);
    PrefillSlots(decode && options_.prefill_chunk > 0 ? options_.prefill_chunk : -1, out);
    if (decode) DecodeActive(out);
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
  counters_.verify_passes += verify_passes_ - verify_before;
  counters_.draft_tokens += drafted_ - drafted_before;
  counters_.accepted_draft_tokens += accepted_ - accepted_before;
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
    while (true) {
      {
        std::unique_lock<std::mutex> wait_lock(mu_);
        work_cv_.wait(wait_lock, [this] { return stopping_ || !IdleLocked(); });
        if (stopping_) return;
      }
      try {
        Step();
      } catch (...) {  // NOLINT(bugprone-empty-catch): Step fails requests, never the thread
      }
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
