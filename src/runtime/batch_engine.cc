#include "runtime/batch_engine.h"

#include <algorithm>
#include <chrono>

namespace vls {

size_t GenerationRequest::bytes() const {
  return tokens.size() * sizeof(int32_t) + embeddings.size() * sizeof(float) +
         positions.data.size() * sizeof(int32_t) + (deepstack ? deepstack->bytes() : 0);
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

BatchEngine::BatchEngine(const LoadedModel& model, EventCallback callback)
    : model_(model), callback_(std::move(callback)) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.resize(static_cast<size_t>(model.bounds().slots));
  for (Slot& s : slots_) s.session = std::make_unique<Session>(model);
}

BatchEngine::~BatchEngine() { Stop(); }

Status BatchEngine::Validate(const GenerationRequest& r) const {
  const Qwen3Config& cfg = model_.config();
  const int capacity = model_.bounds().capacity;
  const int64_t S = r.positions.length;
  if (r.embeddings.empty()) {
    if (r.deepstack) return InvalidArgument("a DeepStack request needs embeddings");
    if (static_cast<int64_t>(r.tokens.size()) != S) {
      return InvalidArgument("tokens: " + std::to_string(r.tokens.size()) +
                             " ids but the positions cover " + std::to_string(S));
    }
    VLS_RETURN_IF_ERROR(ValidateTokenIds(r.tokens, cfg.vocab, "tokens"));
    VLS_RETURN_IF_ERROR(ValidatePrefillInputs(model_, capacity, S, {}, r.positions, false));
  } else {
    if (r.deepstack) {
      VLS_RETURN_IF_ERROR(
          ValidateDeepStackForModel(*r.deepstack, cfg, model_.bounds().nmax, r.positions.mode));
    }
    VLS_RETURN_IF_ERROR(
        ValidatePrefillInputs(model_, capacity, S, r.embeddings, r.positions, true));
    if (!r.tokens.empty()) {
      if (static_cast<int64_t>(r.tokens.size()) != S) {
        return InvalidArgument("tokens: " + std::to_string(r.tokens.size()) +
                               " ids but the embeddings have " + std::to_string(S) + " rows");
      }
      VLS_RETURN_IF_ERROR(ValidateTokenIds(r.tokens, cfg.vocab, "tokens"));
    }
    if (r.deepstack) {
      DeepStackRequestFacts f;
      f.sequence_length = S;
      if (!r.tokens.empty()) f.token_ids = std::span<const int32_t>(r.tokens);
      f.image_token_id = cfg.image_token_id;
      f.video_token_id = cfg.video_token_id;
      VLS_RETURN_IF_ERROR(ValidateDeepStackRequest(*r.deepstack, f));
    }
  }
  VLS_RETURN_IF_ERROR(DecodeCoordinate(S, r.rope_delta).status().WithContext("rope_delta"));
  if (r.max_new_tokens <= 0) return InvalidArgument("max_new_tokens must be positive");
  if (S + r.max_new_tokens > capacity) {
    return OutOfRange("prompt " + std::to_string(S) + " + max_new_tokens " +
                      std::to_string(r.max_new_tokens) + " exceeds the context capacity " +
                      std::to_string(capacity));
  }
  return ValidateSamplingParams(r.sampling);
}

StatusOr<uint64_t> BatchEngine::Submit(GenerationRequest request) {
  VLS_RETURN_IF_ERROR(Validate(request));  // no engine state is read or changed
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  pending_bytes_ += request.bytes();
  pending_.push_back({id, std::move(request)});
  work_cv_.notify_all();
  return id;
}

Status BatchEngine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->id != id) continue;
    pending_bytes_ -= it->request.bytes();
    pending_.erase(it);  // frees the request's buffers now
    std::vector<TokenEvent> events;
    Deliver({id, -1, FinishReason::kCancelled, ""}, &events);
    return Status::Ok();
  }
  for (Slot& s : slots_) {
    if (s.active && s.id == id) {
      std::vector<TokenEvent> events;
      Finish(s, FinishReason::kCancelled, "", &events);
      return Status::Ok();
    }
  }
  return NotFound("request " + std::to_string(id) + " is not queued or active");
}

bool BatchEngine::Deliver(const TokenEvent& e, std::vector<TokenEvent>* events) {
  events->push_back(e);
  if (threaded_) {
    event_queue_.push_back(e);
    events_cv_.notify_all();
  }
  if (!callback_) return true;
  try {
    return callback_(e);
  } catch (...) {
    return true;  // a throwing callback must not take the engine down
  }
}

void BatchEngine::Finish(Slot& slot, FinishReason reason, const std::string& error,
                         std::vector<TokenEvent>* events) {
  const uint64_t id = slot.id;
  slot.active = false;
  slot.request = GenerationRequest();
  slot.sampler.reset();
  slot.generated.clear();
  slot.next_token = -1;
  Deliver({id, -1, reason, error}, events);
}

void BatchEngine::EmitToken(Slot& slot, int32_t token, std::vector<TokenEvent>* events) {
  slot.generated.push_back(token);
  const auto& eos = model_.config().eos_token_ids;
  FinishReason finish = FinishReason::kNone;
  if (!slot.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    finish = FinishReason::kStop;  // EOS wins over the length limit
  } else if (static_cast<int>(slot.generated.size()) >= slot.request.max_new_tokens) {
    finish = FinishReason::kLength;
  }
  const bool keep = Deliver({slot.id, token, finish, ""}, events);
  if (finish != FinishReason::kNone) {
    slot.active = false;
    slot.request = GenerationRequest();
    slot.sampler.reset();
    slot.generated.clear();
    slot.next_token = -1;
    return;
  }
  if (!keep) {
    Finish(slot, FinishReason::kCancelled, "", events);
    return;
  }
  slot.next_token = token;
}

void BatchEngine::Admit(std::vector<TokenEvent>* events) {
  for (Slot& slot : slots_) {
    if (slot.active) continue;
    if (pending_.empty()) return;
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    pending_bytes_ -= p.request.bytes();
    GenerationRequest& r = p.request;
    std::vector<float> logits;
    Status st;
    try {
      Session& s = *slot.session;
      if (r.deepstack) {
        DeepStackRequestFacts f;
        if (!r.tokens.empty()) f.token_ids = std::span<const int32_t>(r.tokens);
        f.image_token_id = model_.config().image_token_id;
        f.video_token_id = model_.config().video_token_id;
        st = s.PrefillDeepStack(r.embeddings, r.positions, r.rope_delta, *r.deepstack, f, {},
                                &logits);
      } else if (!r.embeddings.empty()) {
        st = s.PrefillEmbeddings(r.embeddings, r.positions, r.rope_delta, {}, &logits);
      } else {
        st = s.PrefillTokens(r.tokens, r.positions, r.rope_delta, {}, &logits);
      }
    } catch (const std::exception& e) {
      st = Internal(std::string("prefill failed: ") + e.what());
    } catch (...) {
      st = Internal("prefill failed");
    }
    if (!st.ok()) {
      Deliver({p.id, -1, FinishReason::kError, st.ToString()}, events);
      continue;  // the slot stays free for the next request
    }
    slot.active = true;
    slot.id = p.id;
    // The slot keeps the prompt ids (penalties) and the limits; never the DeepStack payload.
    slot.request.tokens = std::move(r.tokens);
    slot.request.max_new_tokens = r.max_new_tokens;
    slot.request.ignore_eos = r.ignore_eos;
    slot.request.sampling = r.sampling;
    slot.sampler = std::make_unique<Sampler>(r.sampling, p.id);
    slot.generated.clear();
    const int32_t tok = slot.sampler->Sample(logits, slot.request.tokens, slot.generated);
    EmitToken(slot, tok, events);
  }
}

void BatchEngine::DecodeActive(std::vector<TokenEvent>* events) {
  std::vector<Slot*> rows;
  for (Slot& s : slots_) {
    if (s.active && s.next_token >= 0) rows.push_back(&s);
  }
  if (rows.empty()) return;
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens;
  for (Slot* s : rows) {
    sessions.push_back(s->session.get());
    tokens.push_back(s->next_token);
  }
  std::vector<float> logits;
  Status st;
  try {
    st = Session::DecodeBatch(sessions, tokens, &logits);
  } catch (...) {
    st = Internal("batched decode failed");
  }
  const size_t V = static_cast<size_t>(model_.config().vocab);
  if (st.ok()) {
    for (size_t b = 0; b < rows.size(); ++b) {
      Slot& s = *rows[b];
      const std::span<const float> row(logits.data() + b * V, V);
      EmitToken(s, s.sampler->Sample(row, s.request.tokens, s.generated), events);
    }
    return;
  }
  // Isolate the failure: decode row by row so one bad row cannot fail the others.
  for (Slot* s : rows) {
    std::vector<float> one;
    Status rs;
    try {
      rs = s->session->Decode(s->next_token, &one);
    } catch (...) {
      rs = Internal("decode failed");
    }
    if (!rs.ok()) {
      Finish(*s, FinishReason::kError, rs.ToString(), events);
      continue;
    }
    EmitToken(*s, s->sampler->Sample(one, s->request.tokens, s->generated), events);
  }
}

std::vector<TokenEvent> BatchEngine::StepLocked() {
  std::vector<TokenEvent> events;
  Admit(&events);
  DecodeActive(&events);
  return events;
}

std::vector<TokenEvent> BatchEngine::Step() {
  std::lock_guard<std::mutex> lock(mu_);
  return StepLocked();
}

std::vector<TokenEvent> BatchEngine::AdmitPending() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TokenEvent> events;
  Admit(&events);
  return events;
}

bool BatchEngine::IdleLocked() const {
  if (!pending_.empty()) return false;
  return std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.active; });
}

void BatchEngine::RunUntilIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!IdleLocked()) StepLocked();
}

void BatchEngine::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (threaded_) return;
  threaded_ = true;
  stopping_ = false;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> engine_lock(mu_);
    while (true) {
      work_cv_.wait(engine_lock, [this] { return stopping_ || !IdleLocked(); });
      if (stopping_) return;
      StepLocked();
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
  return static_cast<size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.active; }));
}

size_t BatchEngine::pending_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_bytes_;
}

std::optional<RopeCoord> BatchEngine::NextCoordinate(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Slot& s : slots_) {
    if (s.active && s.id == id) {
      auto c = DecodeCoordinate(s.session->length(), s.session->rope_delta());
      if (c.ok()) return *c;
    }
  }
  return std::nullopt;
}

std::optional<int> BatchEngine::SlotOf(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].active && slots_[i].id == id) return static_cast<int>(i);
  }
  return std::nullopt;
}

}  // namespace vls
