// The C ABI's batch entry points (vls_request_default_options, vls_batch_*) over
// vls::BatchEngine; the vls_batch handle itself is in capi_internal.h.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "base/status.h"
#include "capi/capi_internal.h"
#include "runtime/batch_engine.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "vlstack/vlstack.h"

namespace vls::capi {
namespace {

static_assert(static_cast<int>(FinishReason::kNone) == VLS_FINISH_NONE &&
                  static_cast<int>(FinishReason::kStop) == VLS_FINISH_STOP &&
                  static_cast<int>(FinishReason::kLength) == VLS_FINISH_LENGTH &&
                  static_cast<int>(FinishReason::kCancelled) == VLS_FINISH_CANCELLED &&
                  static_cast<int>(FinishReason::kError) == VLS_FINISH_ERROR,
              "finish reasons drifted");
constexpr uint32_t kRequestOptionsV1Size = 56;
static_assert(sizeof(vls_request_options) == kRequestOptionsV1Size);
static_assert(offsetof(vls_request_options, seed) == 48);
static_assert(sizeof(vls_token_event) == 16);

Status CheckBatch(const vls_batch* b) {
  if (b == nullptr || b->engine == nullptr) return InvalidArgument("batch is NULL");
  return Status::Ok();
}

Status CheckEventsArgs(const vls_token_event* events, size_t capacity, const size_t* count) {
  if (count == nullptr) return InvalidArgument("count is NULL");
  if (events == nullptr && capacity > 0)
    return InvalidArgument("events is NULL but capacity is not 0");
  return Status::Ok();
}

Status CheckFlag(const char* field, int32_t v) {
  if (v != 0 && v != 1) {
    return InvalidArgument(std::string("options.") + field + ": " + std::to_string(v) +
                           " is not 0 or 1");
  }
  return Status::Ok();
}

// Copies the known prefix of the caller's options into `r` (NULL: the defaults). The value
// ranges are the engine's to check at submit.
Status ReadRequestOptions(const vls_request_options* options, GenerationRequest* r) {
  vls_request_options o = vls_request_default_options();
  if (options != nullptr) {
    if (options->struct_size < kRequestOptionsV1Size) {
      return InvalidArgument("options.struct_size " + std::to_string(options->struct_size) +
                             " is smaller than the ABI 1 vls_request_options (" +
                             std::to_string(kRequestOptionsV1Size) + " bytes)");
    }
    std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof(o)));
  }
  VLS_RETURN_IF_ERROR(CheckFlag("ignore_eos", o.ignore_eos));
  VLS_RETURN_IF_ERROR(CheckFlag("has_seed", o.has_seed));
  r->max_new_tokens = o.max_new_tokens;
  r->ignore_eos = o.ignore_eos != 0;
  r->sampling.temperature = o.temperature;
  r->sampling.top_k = o.top_k;
  r->sampling.top_p = o.top_p;
  r->sampling.min_p = o.min_p;
  r->sampling.repetition_penalty = o.repetition_penalty;
  r->sampling.presence_penalty = o.presence_penalty;
  r->sampling.frequency_penalty = o.frequency_penalty;
  if (o.has_seed != 0) r->sampling.seed = o.seed;
  return Status::Ok();
}

// Hands a fully read request to the engine, which validates it whole before queueing.
Status SubmitRequest(vls_batch* b, GenerationRequest r, uint64_t* out_id) {
  VLS_ASSIGN_OR_RETURN(uint64_t id, b->engine->Submit(std::move(r)));
  *out_id = id;
  return Status::Ok();
}

Status SubmitTokens(vls_batch* b, const vls_tensor* tokens, int32_t mode,
                    const vls_tensor* positions, int32_t delta, const vls_request_options* options,
                    uint64_t* out_id) {
  VLS_RETURN_IF_ERROR(CheckBatch(b));
  if (out_id == nullptr) return InvalidArgument("out_id is NULL");
  const LoadedModel& lm = *b->model->lm;
  const Qwen3Config& cfg = lm.config();
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, false));
  VLS_RETURN_IF_ERROR(CheckDescriptor(tokens, "tokens", VLS_DTYPE_I32, {kAnyDim}));
  const int64_t S = tokens->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("tokens", S, lm.bounds().capacity));
  GenerationRequest r;
  VLS_ASSIGN_OR_RETURN(r.positions, ReadPositions(positions, cfg.position_mode, S));
  VLS_RETURN_IF_ERROR(ReadRequestOptions(options, &r));
  const auto ids = Values<int32_t>(*tokens);
  r.tokens.assign(ids.begin(), ids.end());
  r.rope_delta = delta;
  return SubmitRequest(b, std::move(r), out_id);
}

Status SubmitEmbeddings(vls_batch* b, const vls_tensor* embeddings, int32_t mode,
                        const vls_tensor* positions, int32_t delta, const vls_tensor* token_ids,
                        const vls_request_options* options, uint64_t* out_id) {
  VLS_RETURN_IF_ERROR(CheckBatch(b));
  if (out_id == nullptr) return InvalidArgument("out_id is NULL");
  const LoadedModel& lm = *b->model->lm;
  const Qwen3Config& cfg = lm.config();
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, false));
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(embeddings, "embeddings", VLS_DTYPE_F32, {kAnyDim, cfg.hidden}));
  const int64_t S = embeddings->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("embeddings", S, lm.bounds().capacity));
  GenerationRequest r;
  VLS_ASSIGN_OR_RETURN(r.positions, ReadPositions(positions, cfg.position_mode, S));
  if (token_ids != nullptr) {
    VLS_RETURN_IF_ERROR(CheckDescriptor(token_ids, "token_ids", VLS_DTYPE_I32, {S}));
  }
  VLS_RETURN_IF_ERROR(ReadRequestOptions(options, &r));
  const auto emb = Values<float>(*embeddings);
  r.embeddings.assign(emb.begin(), emb.end());
  if (token_ids != nullptr) {
    const auto ids = Values<int32_t>(*token_ids);
    r.tokens.assign(ids.begin(), ids.end());
  }
  r.rope_delta = delta;
  return SubmitRequest(b, std::move(r), out_id);
}

Status SubmitDeepStack(vls_batch* b, const vls_tensor* embeddings, int32_t mode,
                       const vls_tensor* positions, int32_t delta,
                       const vls_tensor* visual_positions, const vls_tensor* layer_features,
                       const vls_tensor* layer_indices, const vls_tensor* token_ids,
                       const vls_request_options* options, uint64_t* out_id) {
  VLS_RETURN_IF_ERROR(CheckBatch(b));
  if (out_id == nullptr) return InvalidArgument("out_id is NULL");
  const LoadedModel& lm = *b->model->lm;
  const Qwen3Config& cfg = lm.config();
  VLS_RETURN_IF_ERROR(CheckDeclared(cfg));
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, true));
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(embeddings, "embeddings", VLS_DTYPE_F32, {kAnyDim, cfg.hidden}));
  const int64_t S = embeddings->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("embeddings", S, lm.bounds().capacity));
  GenerationRequest r;
  VLS_ASSIGN_OR_RETURN(r.positions, ReadPositions(positions, cfg.position_mode, S));
  VLS_ASSIGN_OR_RETURN(r.deepstack, ReadDeepStack(lm, S, visual_positions, layer_features,
                                                  layer_indices, token_ids));
  VLS_RETURN_IF_ERROR(ReadRequestOptions(options, &r));
  const auto emb = Values<float>(*embeddings);
  r.embeddings.assign(emb.begin(), emb.end());
  if (token_ids != nullptr) {
    const auto ids = Values<int32_t>(*token_ids);
    r.tokens.assign(ids.begin(), ids.end());
  }
  r.rope_delta = delta;
  // Layers 2-3 (and everything else) run in the engine's Submit before the request is queued.
  return SubmitRequest(b, std::move(r), out_id);
}

// A synchronous stepping call: refused while the batch's thread runs.
template <typename F>
Status StepAndDrain(vls_batch* b, vls_token_event* events, size_t capacity, size_t* count,
                    F&& step) {
  VLS_RETURN_IF_ERROR(CheckBatch(b));
  VLS_RETURN_IF_ERROR(CheckEventsArgs(events, capacity, count));
  {
    std::lock_guard<std::mutex> lock(b->run_mu);
    if (b->threaded) {
      return FailedPrecondition(
          "the batch's thread is running (vls_batch_start); use "
          "vls_batch_poll or vls_batch_wait, or vls_batch_stop first");
    }
    step();  // every event reaches the buffer through the engine's callback
  }
  *count = b->Drain(events, capacity);
  return Status::Ok();
}

}  // namespace
}  // namespace vls::capi

using vls::InvalidArgument;
using vls::Status;
using vls::capi::Guard;

extern "C" {

vls_request_options vls_request_default_options(void) {
  vls_request_options o;
  std::memset(&o, 0, sizeof(o));
  const vls::GenerationRequest r;
  o.struct_size = sizeof(vls_request_options);
  o.max_new_tokens = r.max_new_tokens;
  o.ignore_eos = r.ignore_eos ? 1 : 0;
  o.temperature = r.sampling.temperature;
  o.top_k = r.sampling.top_k;
  o.top_p = r.sampling.top_p;
  o.min_p = r.sampling.min_p;
  o.repetition_penalty = r.sampling.repetition_penalty;
  o.presence_penalty = r.sampling.presence_penalty;
  o.frequency_penalty = r.sampling.frequency_penalty;
  o.has_seed = 0;
  o.seed = 0;
  return o;
}

vls_status vls_batch_create(const vls_model* model, vls_batch** out) {
  return Guard("vls_batch_create", [&]() -> Status {
    if (model == nullptr) return InvalidArgument("model is NULL");
    if (out == nullptr) return InvalidArgument("out is NULL");
    auto b = std::make_unique<vls_batch>();
    b->model = model;
    vls_batch* raw = b.get();
    VLS_ASSIGN_OR_RETURN(
        b->engine, vls::BatchEngine::Create(
                       *model->lm, [raw](const vls::TokenEvent& e) { return raw->OnEvent(e); }));
    *out = b.release();
    return Status::Ok();
  });
}

void vls_batch_free(vls_batch* batch) {
  try {
    delete batch;
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors do not throw; nothing may escape
  }
}

vls_status vls_batch_submit_tokens(vls_batch* batch, const vls_tensor* tokens,
                                   int32_t position_mode, const vls_tensor* positions,
                                   int32_t rope_delta, const vls_request_options* options,
                                   uint64_t* out_id) {
  return Guard("vls_batch_submit_tokens", [&] {
    return vls::capi::SubmitTokens(batch, tokens, position_mode, positions, rope_delta, options,
                                   out_id);
  });
}

vls_status vls_batch_submit_embeddings(vls_batch* batch, const vls_tensor* embeddings,
                                       int32_t position_mode, const vls_tensor* positions,
                                       int32_t rope_delta, const vls_tensor* token_ids,
                                       const vls_request_options* options, uint64_t* out_id) {
  return Guard("vls_batch_submit_embeddings", [&] {
    return vls::capi::SubmitEmbeddings(batch, embeddings, position_mode, positions, rope_delta,
                                       token_ids, options, out_id);
  });
}

vls_status vls_batch_submit_deepstack(vls_batch* batch, const vls_tensor* embeddings,
                                      int32_t position_mode, const vls_tensor* positions,
                                      int32_t rope_delta, const vls_tensor* visual_positions,
                                      const vls_tensor* layer_features,
                                      const vls_tensor* layer_indices, const vls_tensor* token_ids,
                                      const vls_request_options* options, uint64_t* out_id) {
  return Guard("vls_batch_submit_deepstack", [&] {
    return vls::capi::SubmitDeepStack(batch, embeddings, position_mode, positions, rope_delta,
                                      visual_positions, layer_features, layer_indices, token_ids,
                                      options, out_id);
  });
}

vls_status vls_batch_cancel(vls_batch* batch, uint64_t id) {
  return Guard("vls_batch_cancel", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    return batch->engine->Cancel(id);
  });
}

vls_status vls_batch_step(vls_batch* batch, vls_token_event* events, size_t capacity,
                          size_t* count) {
  return Guard("vls_batch_step", [&] {
    return vls::capi::StepAndDrain(batch, events, capacity, count, [&] { batch->engine->Step(); });
  });
}

vls_status vls_batch_admit(vls_batch* batch, vls_token_event* events, size_t capacity,
                           size_t* count) {
  return Guard("vls_batch_admit", [&] {
    return vls::capi::StepAndDrain(batch, events, capacity, count,
                                   [&] { batch->engine->AdmitPending(); });
  });
}

vls_status vls_batch_run_until_idle(vls_batch* batch) {
  return Guard("vls_batch_run_until_idle", [&] {
    size_t none = 0;
    return vls::capi::StepAndDrain(batch, nullptr, 0, &none,
                                   [&] { batch->engine->RunUntilIdle(); });
  });
}

vls_status vls_batch_poll(vls_batch* batch, vls_token_event* events, size_t capacity,
                          size_t* count) {
  return Guard("vls_batch_poll", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    VLS_RETURN_IF_ERROR(vls::capi::CheckEventsArgs(events, capacity, count));
    *count = batch->Drain(events, capacity);
    return Status::Ok();
  });
}

vls_status vls_batch_wait(vls_batch* batch, int32_t timeout_ms, vls_token_event* events,
                          size_t capacity, size_t* count) {
  return Guard("vls_batch_wait", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    VLS_RETURN_IF_ERROR(vls::capi::CheckEventsArgs(events, capacity, count));
    if (timeout_ms < 0) {
      return InvalidArgument("timeout_ms: " + std::to_string(timeout_ms) + " is negative");
    }
    {
      std::unique_lock<std::mutex> lock(batch->events_mu);
      batch->events_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                [batch] { return !batch->events.empty(); });
    }
    *count = batch->Drain(events, capacity);
    return Status::Ok();
  });
}

vls_status vls_batch_start(vls_batch* batch) {
  return Guard("vls_batch_start", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    std::lock_guard<std::mutex> lock(batch->run_mu);
    if (batch->threaded) return Status::Ok();
    batch->engine->Start();
    batch->threaded = true;
    return Status::Ok();
  });
}

vls_status vls_batch_stop(vls_batch* batch) {
  return Guard("vls_batch_stop", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    std::lock_guard<std::mutex> lock(batch->run_mu);
    batch->engine->Stop();
    batch->threaded = false;
    return Status::Ok();
  });
}

vls_status vls_batch_pending_count(const vls_batch* batch, size_t* out) {
  return Guard("vls_batch_pending_count", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = batch->engine->pending_count();
    return Status::Ok();
  });
}

vls_status vls_batch_active_count(const vls_batch* batch, size_t* out) {
  return Guard("vls_batch_active_count", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = batch->engine->active_count();
    return Status::Ok();
  });
}

vls_status vls_batch_pending_bytes(const vls_batch* batch, uint64_t* out) {
  return Guard("vls_batch_pending_bytes", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = batch->engine->pending_bytes();
    return Status::Ok();
  });
}

vls_status vls_batch_buffered_count(const vls_batch* batch, size_t* out) {
  return Guard("vls_batch_buffered_count", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    std::lock_guard<std::mutex> lock(batch->events_mu);
    *out = batch->events.size();
    return Status::Ok();
  });
}

vls_status vls_batch_next_coordinate(const vls_batch* batch, uint64_t id, int32_t out[3]) {
  return Guard("vls_batch_next_coordinate", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    const std::optional<vls::RopeCoord> c = batch->engine->NextCoordinate(id);
    if (!c) return vls::NotFound("request " + std::to_string(id) + " is not active");
    for (size_t i = 0; i < 3; ++i) out[i] = (*c)[i];
    return Status::Ok();
  });
}

vls_status vls_batch_slot_of(const vls_batch* batch, uint64_t id, int32_t* out) {
  return Guard("vls_batch_slot_of", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    const std::optional<int> slot = batch->engine->SlotOf(id);
    if (!slot) return vls::NotFound("request " + std::to_string(id) + " is not active");
    *out = *slot;
    return Status::Ok();
  });
}

vls_status vls_batch_request_error(const vls_batch* batch, uint64_t id, char* buf, size_t len,
                                   size_t* needed) {
  return Guard("vls_batch_request_error", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckBatch(batch));
    if (buf == nullptr && len > 0) return InvalidArgument("buf is NULL but len is not 0");
    std::lock_guard<std::mutex> lock(batch->events_mu);
    const auto it = batch->errors.find(id);
    if (it == batch->errors.end()) {
      return vls::NotFound("request " + std::to_string(id) + " has not finished with an error");
    }
    const size_t need = it->second.size() + 1;
    if (needed != nullptr) *needed = need;
    if (len < need) {
      return vls::OutOfRange("buf holds " + std::to_string(len) + " bytes; the message needs " +
                             std::to_string(need));
    }
    std::memcpy(buf, it->second.c_str(), need);
    return Status::Ok();
  });
}

}  // extern "C"
