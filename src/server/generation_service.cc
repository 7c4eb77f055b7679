#include "server/generation_service.h"

#include <system_error>
#include <utility>

namespace vls::server {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

bool RequestHandle::Take(std::vector<OutputPiece>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&]() VLS_REQUIRES(mu_) { return !pieces_.empty() || taken_end_; });
  while (!pieces_.empty()) {
    out->push_back(std::move(pieces_.front()));
    pieces_.pop_front();
  }
  if (reply_.finished()) taken_end_ = true;
  return taken_end_;
}

bool RequestHandle::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reply_.finished();
}

std::optional<Clock::time_point> RequestHandle::first_token() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
}

bool RequestHandle::Push(const TokenEvent& e, Clock::time_point now, ServerMetrics* metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reply_.finished()) return true;  // the engine's cancelled event after a stop string
  OutputPiece p;
  const bool keep = reply_.Feed(e, &p.delta);
  p.token = e.token;
  p.logprob = e.logprob;
  p.top_logprobs = e.top_logprobs;
  if (e.token >= 0 && metrics != nullptr) {
    metrics->AddGeneratedTokens(1);
    if (!first_) {
      first_ = now;
      metrics->ObserveTimeToFirstToken(Seconds(now - submitted_));
    } else {
      metrics->ObserveInterTokenLatency(Seconds(now - last_));
    }
    last_ = now;
  }
  if (p.delta.finish != FinishReason::kNone) {
    if (metrics != nullptr) {
      metrics->AddPromptTokens(p.delta.usage.prompt_tokens, p.delta.usage.cached_tokens);
    }
  }
  pieces_.push_back(std::move(p));
  cv_.notify_all();
  return keep;
}

StatusOr<std::unique_ptr<GenerationService>> GenerationService::Create(const LoadedModel& model,
                                                                       const ChatPipeline& pipeline,
                                                                       EngineOptions engine_options,
                                                                       ServiceOptions options,
                                                                       ServerMetrics* metrics) {
  std::unique_ptr<GenerationService> s(new GenerationService(pipeline, options, metrics));
  GenerationService* self = s.get();
  VLS_ASSIGN_OR_RETURN(s->engine_,
                       BatchEngine::Create(
                           model, [self](const TokenEvent& e) { return self->OnEvent(e); },
                           std::move(engine_options)));
  s->slots_ = model.bounds().slots;
  try {
    s->engine_->Start();
  } catch (const std::system_error& e) {
    return Internal(std::string("cannot start the engine thread: ") + e.what());
  }
  return s;
}

GenerationService::~GenerationService() {
  if (engine_) {
    CancelAll();
    engine_->Stop();
  }
}

bool GenerationService::OnEvent(const TokenEvent& e) {
  const Clock::time_point now = Clock::now();
  std::shared_ptr<RequestHandle> h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(e.request_id);
    if (it == live_.end()) return true;
    h = it->second;
  }
  const bool keep = h->Push(e, now, metrics_);
  if (e.finish != FinishReason::kNone || h->finished()) {
    std::lock_guard<std::mutex> lock(mu_);
    // A stop string finished the stream: the engine's cancelled event follows; keep the entry
    // until the engine's own finish so that event finds it (and is dropped by Push).
    if (e.finish != FinishReason::kNone) live_.erase(e.request_id);
    idle_cv_.notify_all();
  }
  return keep;
}

QueueTicket& QueueTicket::operator=(QueueTicket&& o) noexcept {
  if (this != &o) {
    Release();
    service_ = o.service_;
    o.service_ = nullptr;
  }
  return *this;
}

void QueueTicket::Release() {
  if (service_ == nullptr) return;
  std::lock_guard<std::mutex> lock(service_->mu_);
  --service_->reserved_;
  service_ = nullptr;
}

bool GenerationService::QueueFull() const {
  // Requests that a free slot takes at the next step do not wait.
  const size_t active = engine_->active_count();
  const size_t free_slots = active < static_cast<size_t>(slots_) ? slots_ - active : 0;
  return engine_->pending_count() + reserved_ >= options_.max_queue + free_slots;
}

namespace {
Status QueueFullError(size_t max_queue) {
  return ResourceExhausted("the server is busy: " + std::to_string(max_queue) +
                           " requests are already waiting; retry later");
}
}  // namespace

StatusOr<QueueTicket> GenerationService::Reserve() {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) {
    return FailedPrecondition("the server is shutting down and takes no new requests");
  }
  if (QueueFull()) return QueueFullError(options_.max_queue);
  ++reserved_;
  return QueueTicket(this);
}

StatusOr<std::shared_ptr<RequestHandle>> GenerationService::Submit(PreparedChat chat) {
  return Submit(std::move(chat), QueueTicket());
}

StatusOr<std::shared_ptr<RequestHandle>> GenerationService::Submit(PreparedChat chat,
                                                                   QueueTicket ticket) {
  TextStream stream = pipeline_.NewTextStream(chat);
  // The handle is registered under mu_ before the engine can deliver one of its events (the
  // engine thread's OnEvent waits for mu_).
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) {
    return FailedPrecondition("the server is shutting down and takes no new requests");
  }
  const bool ticketed = ticket.service_ == this;
  if (ticketed) {
    // The ticket's place becomes the request's (released here, under the same lock).
    --reserved_;
    ticket.service_ = nullptr;
  } else if (QueueFull()) {
    return QueueFullError(options_.max_queue);
  }
  const Clock::time_point now = Clock::now();
  VLS_ASSIGN_OR_RETURN(uint64_t id, engine_->Submit(std::move(chat.request)));
  auto h = std::make_shared<RequestHandle>(id, std::move(stream), now);
  live_.emplace(id, h);
  return h;
}

void GenerationService::Cancel(const RequestHandle& handle) {
  if (handle.finished()) return;
  // NotFound: it finished meanwhile; nothing to do.
  (void)engine_->Cancel(handle.id());
}

void GenerationService::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
  idle_cv_.notify_all();
}

bool GenerationService::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

bool GenerationService::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&]() VLS_REQUIRES(mu_) { return live_.empty(); });
}

void GenerationService::CancelAll() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, h] : live_) ids.push_back(id);
  }
  for (uint64_t id : ids) (void)engine_->Cancel(id);
}

ServiceLoad GenerationService::load() const {
  ServiceLoad l;
  l.queued = static_cast<int64_t>(engine_->pending_count());
  l.busy = static_cast<int64_t>(engine_->active_count());
  l.slots = slots_;
  const EngineCounters c = engine_->counters();
  l.verify_passes = static_cast<int64_t>(c.verify_passes);
  l.draft_tokens = static_cast<int64_t>(c.draft_tokens);
  l.accepted_draft_tokens = static_cast<int64_t>(c.accepted_draft_tokens);
  l.steps = static_cast<int64_t>(c.steps);
  l.prefill_chunks = static_cast<int64_t>(c.prefill_chunks);
  l.mixed_passes = static_cast<int64_t>(c.mixed_passes);
  l.copied_prefixes = static_cast<int64_t>(c.copied_prefixes);
  l.kv_preemptions = static_cast<int64_t>(c.preemptions);
  l.kv_evictions = static_cast<int64_t>(c.evictions);
  l.kv_blocks = static_cast<int64_t>(c.kv_blocks);
  l.kv_blocks_used = static_cast<int64_t>(c.kv_blocks_used);
  l.prefix_cache_blocks = static_cast<int64_t>(c.shared_prefix_blocks);
  l.kv_blocks_cached = static_cast<int64_t>(c.kv_blocks_cached);
  std::lock_guard<std::mutex> lock(mu_);
  l.in_flight = static_cast<int64_t>(live_.size());
  l.reserved = static_cast<int64_t>(reserved_);
  return l;
}

}  // namespace vls::server
