// The C ABI (include/vlstack/vlstack.h) over the C++ runtime.
//
// Defense in depth (CONTRACTS §2 layer 4): every descriptor is checked here, on the raw
// pointers, before any C++ object is built from it; the value rules then go through the same
// validators the C++ API uses, explicitly, before the session runs anything. Every entry point
// catches everything, so no exception leaves the library.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/checked_math.h"
#include "base/status.h"
#include "runtime/batch_engine.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/session.h"
#include "vlstack/vlstack.h"

struct vls_model {
  std::unique_ptr<vls::LoadedModel> lm;
};

struct vls_session {
  const vls_model* model = nullptr;
  std::unique_ptr<vls::Session> session;
  std::vector<float> logits;
  bool has_logits = false;
  // Set when a call failed after it began to write the KV cache (only an internal failure,
  // such as running out of memory, can do that): the cache no longer matches length, so
  // decode is refused until a prefill succeeds.
  bool poisoned = false;
};

// The batch handle: the engine plus the event buffer its callback fills, and an optional
// stepping thread of its own.
//
// Lock order: run_mu -> (the engine's mutex) -> events_mu; thread_mu is never held while the
// engine is called. The engine calls `OnEvent` on the stepping thread with its mutex held, so
// nothing here calls the engine while holding events_mu.
struct vls_batch {
  const vls_model* model = nullptr;

  mutable std::mutex events_mu;
  std::condition_variable events_cv;                 // signalled when an event is buffered
  std::deque<vls_token_event> events;                // guarded by events_mu
  std::unordered_map<uint64_t, std::string> errors;  // guarded by events_mu

  // Serialises synchronous stepping with vls_batch_start/stop.
  std::mutex run_mu;
  bool threaded = false;  // guarded by run_mu

  // The stepping thread's wake-up: set by submissions and by stop.
  std::mutex thread_mu;
  std::condition_variable work_cv;
  bool stopping = false;  // guarded by thread_mu
  bool work = false;      // guarded by thread_mu
  std::thread thread;

  // Last, so that it is destroyed first (its callback refers to the members above).
  std::unique_ptr<vls::BatchEngine> engine;

  vls_batch() = default;
  vls_batch(const vls_batch&) = delete;
  vls_batch& operator=(const vls_batch&) = delete;
  ~vls_batch() { StopThread(); }

  bool OnEvent(const vls::TokenEvent& e) {
    std::lock_guard<std::mutex> lock(events_mu);
    if (e.finish == vls::FinishReason::kError) errors[e.request_id] = e.error;
    events.push_back({e.request_id, e.token, static_cast<int32_t>(e.finish)});
    events_cv.notify_all();
    return true;
  }

  void Wake() {
    std::lock_guard<std::mutex> lock(thread_mu);
    work = true;
    work_cv.notify_all();
  }

  // The stepping thread: steps while the engine has work, sleeps until a submission otherwise.
  void Loop() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(thread_mu);
        if (stopping) return;
        work = false;  // a submission after this point wakes the wait below
      }
      bool idle = true;
      try {
        idle = engine->Idle();
        if (!idle) engine->Step();
      } catch (...) {
        // The engine reports failures per request; anything else (out of memory) must not
        // end the thread: back off and retry.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (idle) {
        std::unique_lock<std::mutex> lock(thread_mu);
        work_cv.wait(lock, [this] { return stopping || work; });
      }
    }
  }

  // REQUIRES: run_mu held, or the handle being destroyed.
  void StopThread() {
    if (!thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(thread_mu);
      stopping = true;
      work_cv.notify_all();
    }
    thread.join();
    std::lock_guard<std::mutex> lock(thread_mu);
    stopping = false;
  }

  // Moves up to `capacity` buffered events into `out`.
  size_t Drain(vls_token_event* out, size_t capacity) {
    std::lock_guard<std::mutex> lock(events_mu);
    const size_t n = std::min(capacity, events.size());
    std::copy_n(events.begin(), n, out);
    events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
};

namespace vls {
namespace {

static_assert(VLS_ABI_VERSION == static_cast<unsigned>(kAbiVersion),
              "header and runtime ABI versions differ");
static_assert(sizeof(vls_status) == sizeof(int32_t), "vls_status must be int-sized");
static_assert(static_cast<int>(StatusCode::kCancelled) == VLS_ERR_CANCELLED,
              "status codes drifted");
static_assert(static_cast<int>(StatusCode::kResourceExhausted) == VLS_ERR_RESOURCE_EXHAUSTED,
              "status codes drifted");
static_assert(static_cast<int>(PositionMode::kMrope) == VLS_POSITIONS_MROPE,
              "position modes drifted");

// The sizes of the ABI 1 structs: a smaller struct_size is refused.
constexpr uint32_t kModelOptionsV1Size = 20;
constexpr uint32_t kModelDescV1Size = 64;
static_assert(sizeof(vls_model_options) >= kModelOptionsV1Size);
static_assert(sizeof(vls_model_desc) >= kModelDescV1Size);

thread_local std::string g_last_error;

vls_status Fail(const char* fn, const Status& s) {
  g_last_error = std::string(fn) + ": " + s.message();
  return static_cast<vls_status>(s.code());
}

vls_status Finish(const char* fn, const Status& s) {
  if (s.ok()) {
    g_last_error.clear();
    return VLS_OK;
  }
  return Fail(fn, s);
}

// Runs `body` (returning Status) with every exception turned into a status.
template <typename F>
vls_status Guard(const char* fn, F&& body) {
  try {
    return Finish(fn, body());
  } catch (const std::bad_alloc&) {
    return Fail(fn, ResourceExhausted("out of memory"));
  } catch (const std::exception& e) {
    return Fail(fn, Internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Fail(fn, Internal("unexpected non-standard exception"));
  }
}

// How a descriptor failure is reported: DeepStack tensors name the layer-1 rule of
// CONTRACTS §2 ("deepstack.<rule>: ..."), other tensors an "abi.<rule>" of their own.
enum class Rule { kDType, kRank, kShape, kByteCount, kPointer };

Status DescriptorError(bool deepstack, Rule rule, const std::string& detail) {
  if (deepstack) {
    DeepStackRule r = DeepStackRule::kShape;
    switch (rule) {
      case Rule::kDType: r = DeepStackRule::kDType; break;
      case Rule::kRank: r = DeepStackRule::kRank; break;
      case Rule::kShape: r = DeepStackRule::kShape; break;
      case Rule::kByteCount:
      case Rule::kPointer: r = DeepStackRule::kByteCount; break;
    }
    return DeepStackError(r, detail);
  }
  const char* name = "shape";
  switch (rule) {
    case Rule::kDType: name = "dtype"; break;
    case Rule::kRank: name = "rank"; break;
    case Rule::kShape: name = "shape"; break;
    case Rule::kByteCount: name = "byte_length"; break;
    case Rule::kPointer: name = "pointer"; break;
  }
  return InvalidArgument(std::string("abi.") + name + ": " + detail);
}

const char* DTypeText(int32_t dtype) {
  switch (dtype) {
    case VLS_DTYPE_F32: return "F32";
    case VLS_DTYPE_I32: return "I32";
    default: return "an unknown dtype";
  }
}

std::string DimsText(const vls_tensor& t) {
  std::string s = "[";
  for (int32_t i = 0; i < t.rank && i < 4; ++i) s += (i ? "," : "") + std::to_string(t.dims[i]);
  return s + "]";
}

constexpr int64_t kAnyDim = -1;

// The ABI's own descriptor check. `want` holds the expected dims (kAnyDim: any size >= 0);
// its size is the expected rank.
Status CheckDescriptor(const vls_tensor* t, const char* tensor, int32_t dtype,
                       std::initializer_list<int64_t> want, bool deepstack = false) {
  const std::string name(tensor);
  if (t == nullptr) {
    return DescriptorError(deepstack, Rule::kPointer, name + ": the tensor descriptor is NULL");
  }
  if (t->dtype != dtype) {
    return DescriptorError(deepstack, Rule::kDType,
                           name + ": dtype must be " + DTypeText(dtype) + ", got " +
                               DTypeText(t->dtype) + " (" + std::to_string(t->dtype) + ")");
  }
  if (t->rank < 1 || t->rank > 4) {
    return DescriptorError(deepstack, Rule::kRank,
                           name + ": rank " + std::to_string(t->rank) + " is outside 1..4");
  }
  if (static_cast<size_t>(t->rank) != want.size()) {
    return DescriptorError(deepstack, Rule::kRank,
                           name + ": rank must be " + std::to_string(want.size()) + ", got " +
                               std::to_string(t->rank) + " " + DimsText(*t));
  }
  size_t i = 0;
  for (int64_t w : want) {
    const int64_t d = t->dims[i];
    if (d < 0) {
      return DescriptorError(
          deepstack, Rule::kShape,
          name + ": dims[" + std::to_string(i) + "] = " + std::to_string(d) + " is negative");
    }
    if (w != kAnyDim && d != w) {
      return DescriptorError(deepstack, Rule::kShape,
                             name + ": dims[" + std::to_string(i) + "] = " + std::to_string(d) +
                                 ", expected " + std::to_string(w) + " (got " + DimsText(*t) + ")");
    }
    ++i;
  }
  const auto bytes =
      CheckedByteCount(std::span<const int64_t>(t->dims, static_cast<size_t>(t->rank)), 4);
  if (!bytes) {
    return DescriptorError(deepstack, Rule::kByteCount,
                           name + ": the byte size of " + DimsText(*t) + " overflows 64 bits");
  }
  if (*bytes != t->byte_length) {
    return DescriptorError(deepstack, Rule::kByteCount,
                           name + ": byte_length " + std::to_string(t->byte_length) +
                               " differs from the " + std::to_string(*bytes) + " bytes of " +
                               DTypeText(dtype) + " " + DimsText(*t));
  }
  if (*bytes > static_cast<uint64_t>(PTRDIFF_MAX)) {
    return DescriptorError(deepstack, Rule::kByteCount,
                           name + ": byte_length exceeds the address space");
  }
  if (t->byte_length > 0 && t->data == nullptr) {
    return DescriptorError(
        deepstack, Rule::kPointer,
        name + ": data is NULL but byte_length is " + std::to_string(t->byte_length));
  }
  if (reinterpret_cast<uintptr_t>(t->data) % 4 != 0) {
    return DescriptorError(deepstack, Rule::kPointer,
                           name + ": data is not aligned to its 4-byte elements");
  }
  return Status::Ok();
}

template <typename T>
std::span<const T> Values(const vls_tensor& t) {
  return {static_cast<const T*>(t.data), static_cast<size_t>(t.byte_length / sizeof(T))};
}

Status CheckSession(const vls_session* s) {
  if (s == nullptr || s->session == nullptr) return InvalidArgument("session is NULL");
  return Status::Ok();
}

// The mode argument must be a known mode and equal to the model's.
Status CheckMode(int32_t mode, const Qwen3Config& cfg, bool deepstack) {
  if (mode != VLS_POSITIONS_1D && mode != VLS_POSITIONS_MROPE) {
    return InvalidArgument("position_mode: " + std::to_string(mode) +
                           " is not a vls_position_mode (0 = 1d, 1 = mrope)");
  }
  const auto m = static_cast<PositionMode>(mode);
  if (m != cfg.position_mode) {
    const std::string detail = std::string("position_mode: the request uses ") +
                               PositionModeName(m) + " positions but the model uses " +
                               PositionModeName(cfg.position_mode);
    return deepstack ? DeepStackError(DeepStackRule::kPositionMode, detail)
                     : InvalidArgument(detail);
  }
  return Status::Ok();
}

// 1 <= S <= C, checked before any buffer of S rows is read or built.
Status CheckLength(const char* tensor, int64_t S, int capacity) {
  if (S <= 0) return InvalidArgument(std::string(tensor) + ": the sequence is empty (S = 0)");
  if (S > capacity) {
    return OutOfRange(std::string(tensor) + ": sequence length S = " + std::to_string(S) +
                      " exceeds the context capacity " + std::to_string(capacity));
  }
  return Status::Ok();
}

// positions: NULL (sequential) or i32 [S] / [3, S] per the model's mode.
StatusOr<PositionIds> ReadPositions(const vls_tensor* positions, PositionMode mode, int64_t S) {
  if (positions == nullptr) return SequentialPositions(mode, S);
  if (mode == PositionMode::kMrope) {
    VLS_RETURN_IF_ERROR(CheckDescriptor(positions, "positions", VLS_DTYPE_I32, {3, S}));
  } else {
    VLS_RETURN_IF_ERROR(CheckDescriptor(positions, "positions", VLS_DTYPE_I32, {S}));
  }
  return PositionsFromTensor(
      mode, std::span<const int64_t>(positions->dims, static_cast<size_t>(positions->rank)),
      Values<int32_t>(*positions), S);
}

// Runs a session call on a scratch logits vector and commits the logits only on success.
template <typename F>
Status RunAndCommit(vls_session* s, F&& call) {
  std::vector<float> logits;
  Status st;
  try {
    st = call(&logits);
  } catch (...) {
    s->poisoned = true;
    throw;
  }
  if (st.ok()) {
    s->logits = std::move(logits);
    s->has_logits = true;
  }
  return st;
}

Status PrefillTokens(vls_session* s, const vls_tensor* tokens, int32_t mode,
                     const vls_tensor* positions, int32_t delta) {
  VLS_RETURN_IF_ERROR(CheckSession(s));
  const Qwen3Config& cfg = s->model->lm->config();
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, false));
  VLS_RETURN_IF_ERROR(CheckDescriptor(tokens, "tokens", VLS_DTYPE_I32, {kAnyDim}));
  const int64_t S = tokens->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("tokens", S, s->session->capacity()));
  VLS_ASSIGN_OR_RETURN(PositionIds pos, ReadPositions(positions, cfg.position_mode, S));
  const auto ids = Values<int32_t>(*tokens);
  Status st = RunAndCommit(s, [&](std::vector<float>* logits) {
    return s->session->PrefillTokens(ids, pos, delta, PrefillOptions{}, logits);
  });
  if (st.ok()) s->poisoned = false;
  return st;
}

Status PrefillEmbeddings(vls_session* s, const vls_tensor* embeddings, int32_t mode,
                         const vls_tensor* positions, int32_t delta) {
  VLS_RETURN_IF_ERROR(CheckSession(s));
  const Qwen3Config& cfg = s->model->lm->config();
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, false));
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(embeddings, "embeddings", VLS_DTYPE_F32, {kAnyDim, cfg.hidden}));
  const int64_t S = embeddings->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("embeddings", S, s->session->capacity()));
  VLS_ASSIGN_OR_RETURN(PositionIds pos, ReadPositions(positions, cfg.position_mode, S));
  const auto emb = Values<float>(*embeddings);
  VLS_RETURN_IF_ERROR(s->session->ValidatePrefill(S, emb, pos));
  Status st = RunAndCommit(s, [&](std::vector<float>* logits) {
    return s->session->PrefillEmbeddings(emb, pos, delta, PrefillOptions{}, logits);
  });
  if (st.ok()) s->poisoned = false;
  return st;
}

// The DeepStack arguments after the embeddings and positions: validation layer 1 on the raw
// descriptors with the static bounds (K, Nmax, H) checked before any copy, the optional
// token_ids descriptor, then DeepStackPayload::Create, which copies the payload. `S` is the
// request's checked sequence length.
StatusOr<DeepStackPayload> ReadDeepStack(const LoadedModel& lm, int64_t S,
                                         const vls_tensor* visual_positions,
                                         const vls_tensor* layer_features,
                                         const vls_tensor* layer_indices,
                                         const vls_tensor* token_ids) {
  const Qwen3Config& cfg = lm.config();
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(visual_positions, "visual_positions", VLS_DTYPE_I32, {kAnyDim}, true));
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(layer_indices, "layer_indices", VLS_DTYPE_I32, {kAnyDim}, true));
  const int64_t Nv = visual_positions->dims[0];
  const int64_t K = layer_indices->dims[0];
  if (K == 0)
    return DeepStackError(DeepStackRule::kEmptyLayerSet, "layer_indices is empty (K = 0)");
  const auto& targets = cfg.deepstack->target_layers;
  if (K != static_cast<int64_t>(targets.size())) {
    return DeepStackError(DeepStackRule::kLayerContract,
                          "layer_indices has K=" + std::to_string(K) +
                              " entries but the model has " + std::to_string(targets.size()) +
                              " DeepStack target layers");
  }
  if (Nv > lm.bounds().nmax) {
    return DeepStackError(DeepStackRule::kStaticMaxOverflow,
                          "visual_positions has Nv=" + std::to_string(Nv) +
                              " > Nmax=" + std::to_string(lm.bounds().nmax));
  }
  if (layer_features != nullptr && layer_features->dtype == VLS_DTYPE_F32 &&
      layer_features->rank == 3 && layer_features->dims[0] == K && layer_features->dims[1] == Nv &&
      layer_features->dims[2] > 0 && layer_features->dims[2] != cfg.hidden) {
    return DeepStackError(DeepStackRule::kHiddenMismatch,
                          "layer_features hidden " + std::to_string(layer_features->dims[2]) +
                              " differs from the model's " + std::to_string(cfg.hidden));
  }
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(layer_features, "layer_features", VLS_DTYPE_F32, {K, Nv, cfg.hidden}, true));
  if (token_ids != nullptr) {
    VLS_RETURN_IF_ERROR(CheckDescriptor(token_ids, "token_ids", VLS_DTYPE_I32, {S}));
  }
  // An empty tensor may come with a NULL pointer; the payload copy gets a valid one.
  static const int32_t kEmpty = 0;
  auto view = [](const vls_tensor& t, DType dtype) {
    Shape shape(t.dims, t.dims + t.rank);
    const void* data = t.data != nullptr ? t.data : &kEmpty;
    return TensorView{dtype, shape, static_cast<const std::byte*>(data),
                      static_cast<size_t>(t.byte_length)};
  };
  return DeepStackPayload::Create(view(*visual_positions, DType::kI32),
                                  view(*layer_features, DType::kF32),
                                  view(*layer_indices, DType::kI32));
}

// The DeepStack entry exists only when the model declares DeepStack.
Status CheckDeclared(const Qwen3Config& cfg) {
  if (!cfg.deepstack) {
    return DeepStackError(
        DeepStackRule::kNotDeclared,
        "the model declares no DeepStack layers, so it has no DeepStack prefill entry");
  }
  return Status::Ok();
}

Status PrefillDeepStack(vls_session* s, const vls_tensor* embeddings, int32_t mode,
                        const vls_tensor* positions, int32_t delta,
                        const vls_tensor* visual_positions, const vls_tensor* layer_features,
                        const vls_tensor* layer_indices, const vls_tensor* token_ids) {
  VLS_RETURN_IF_ERROR(CheckSession(s));
  const LoadedModel& lm = *s->model->lm;
  const Qwen3Config& cfg = lm.config();
  VLS_RETURN_IF_ERROR(CheckDeclared(cfg));
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, true));
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(embeddings, "embeddings", VLS_DTYPE_F32, {kAnyDim, cfg.hidden}));
  const int64_t S = embeddings->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("embeddings", S, s->session->capacity()));
  VLS_ASSIGN_OR_RETURN(PositionIds pos, ReadPositions(positions, cfg.position_mode, S));
  VLS_ASSIGN_OR_RETURN(
      DeepStackPayload payload,
      ReadDeepStack(lm, S, visual_positions, layer_features, layer_indices, token_ids));
  std::optional<std::span<const int32_t>> ids;
  if (token_ids != nullptr) ids = Values<int32_t>(*token_ids);

  // Layers 2-3 through the C++ validators, before the session runs anything.
  const auto emb = Values<float>(*embeddings);
  VLS_RETURN_IF_ERROR(s->session->ValidatePrefill(S, emb, pos));
  DeepStackRequestFacts facts;
  facts.sequence_length = S;
  facts.token_ids = ids;
  facts.image_token_id = cfg.image_token_id;
  facts.video_token_id = cfg.video_token_id;
  VLS_RETURN_IF_ERROR(ValidateDeepStackRequest(payload, facts));
  VLS_RETURN_IF_ERROR(ValidateDeepStackForModel(payload, cfg, lm.bounds().nmax, pos.mode));

  Status st = RunAndCommit(s, [&](std::vector<float>* logits) {
    return s->session->PrefillDeepStack(emb, pos, delta, payload, facts, PrefillOptions{}, logits);
  });
  if (st.ok()) s->poisoned = false;
  return st;
}

// ---- Batch ----------------------------------------------------------------------------------

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
  b->Wake();
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
}  // namespace vls

using vls::Guard;
using vls::InvalidArgument;
using vls::Status;

extern "C" {

uint32_t vls_abi_version(void) { return static_cast<uint32_t>(vls::kAbiVersion); }

const char* vls_last_error(void) { return vls::g_last_error.c_str(); }

const char* vls_status_name(int32_t status) {
  switch (status) {
    case VLS_OK: return "OK";
    case VLS_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case VLS_ERR_NOT_FOUND: return "NOT_FOUND";
    case VLS_ERR_DATA_LOSS: return "DATA_LOSS";
    case VLS_ERR_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case VLS_ERR_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case VLS_ERR_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case VLS_ERR_INTERNAL: return "INTERNAL";
    case VLS_ERR_IO: return "IO_ERROR";
    case VLS_ERR_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case VLS_ERR_CANCELLED: return "CANCELLED";
    default: return "UNKNOWN";
  }
}

vls_model_options vls_model_default_options(void) {
  vls_model_options o;
  std::memset(&o, 0, sizeof(o));
  const vls::LoadOptions d;
  o.struct_size = sizeof(vls_model_options);
  o.capacity = d.capacity;
  o.slots = d.slots;
  o.nmax = d.nmax;
  o.threads = d.threads;
  return o;
}

vls_status vls_model_load(const char* dir, const vls_model_options* options, vls_model** out) {
  return Guard("vls_model_load", [&]() -> Status {
    if (dir == nullptr) return InvalidArgument("dir is NULL");
    if (out == nullptr) return InvalidArgument("out is NULL");
    vls_model_options o = vls_model_default_options();
    if (options != nullptr) {
      if (options->struct_size < vls::kModelOptionsV1Size) {
        return InvalidArgument("options.struct_size " + std::to_string(options->struct_size) +
                               " is smaller than the ABI 1 vls_model_options (" +
                               std::to_string(vls::kModelOptionsV1Size) + " bytes)");
      }
      // Only the prefix this library knows; a newer caller's extra fields are ignored.
      std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof(o)));
    }
    vls::LoadOptions lo;
    lo.capacity = o.capacity;
    lo.slots = o.slots;
    lo.nmax = o.nmax;
    lo.threads = o.threads;
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<vls::LoadedModel> lm, vls::LoadedModel::Load(dir, lo));
    auto m = std::make_unique<vls_model>();
    m->lm = std::move(lm);
    *out = m.release();
    return Status::Ok();
  });
}

void vls_model_free(vls_model* model) {
  try {
    delete model;
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors do not throw; nothing may escape
  }
}

vls_status vls_model_identity(const vls_model* model, char* buf, size_t len) {
  return Guard("vls_model_identity", [&]() -> Status {
    if (model == nullptr) return InvalidArgument("model is NULL");
    if (buf == nullptr) return InvalidArgument("buf is NULL");
    const std::string& id = model->lm->Identity();
    if (len < id.size() + 1) {
      return vls::OutOfRange("buf holds " + std::to_string(len) + " bytes; the identity needs " +
                             std::to_string(id.size() + 1) + " (VLS_IDENTITY_SIZE)");
    }
    std::memcpy(buf, id.c_str(), id.size() + 1);
    return Status::Ok();
  });
}

vls_status vls_model_info(const vls_model* model, vls_model_desc* out) {
  return Guard("vls_model_info", [&]() -> Status {
    if (model == nullptr) return InvalidArgument("model is NULL");
    if (out == nullptr) return InvalidArgument("out is NULL");
    if (out->struct_size < vls::kModelDescV1Size) {
      return InvalidArgument("out->struct_size " + std::to_string(out->struct_size) +
                             " is smaller than the ABI 1 vls_model_desc (" +
                             std::to_string(vls::kModelDescV1Size) + " bytes)");
    }
    const vls::LoadedModel& lm = *model->lm;
    const vls::Qwen3Config& c = lm.config();
    vls_model_desc d;
    std::memset(&d, 0, sizeof(d));
    d.struct_size = out->struct_size;
    d.hidden = c.hidden;
    d.vocab = c.vocab;
    d.layers = c.layers;
    d.heads = c.heads;
    d.kv_heads = c.kv_heads;
    d.head_dim = c.head_dim;
    d.position_mode = static_cast<int32_t>(c.position_mode);
    d.has_deepstack = lm.has_deepstack() ? 1 : 0;
    d.deepstack_layer_count =
        c.deepstack ? static_cast<int32_t>(c.deepstack->target_layers.size()) : 0;
    d.nmax = c.deepstack ? lm.bounds().nmax : 0;
    d.capacity = lm.bounds().capacity;
    d.slots = lm.bounds().slots;
    d.image_token_id = c.image_token_id;
    d.video_token_id = c.video_token_id;
    std::memcpy(out, &d, std::min<size_t>(out->struct_size, sizeof(d)));
    return Status::Ok();
  });
}

vls_status vls_model_deepstack_layers(const vls_model* model, int32_t* layers, size_t capacity,
                                      size_t* count) {
  return Guard("vls_model_deepstack_layers", [&]() -> Status {
    if (model == nullptr) return InvalidArgument("model is NULL");
    if (count == nullptr) return InvalidArgument("count is NULL");
    if (layers == nullptr && capacity > 0)
      return InvalidArgument("layers is NULL but capacity is not 0");
    const auto& ds = model->lm->config().deepstack;
    const size_t k = ds ? ds->target_layers.size() : 0;
    *count = k;
    if (capacity < k) {
      return vls::OutOfRange("layers holds " + std::to_string(capacity) +
                             " entries; the model has K=" + std::to_string(k));
    }
    for (size_t i = 0; i < k; ++i) layers[i] = ds->target_layers[i];
    return Status::Ok();
  });
}

vls_status vls_session_create(const vls_model* model, vls_session** out) {
  return Guard("vls_session_create", [&]() -> Status {
    if (model == nullptr) return InvalidArgument("model is NULL");
    if (out == nullptr) return InvalidArgument("out is NULL");
    auto s = std::make_unique<vls_session>();
    s->model = model;
    s->session = std::make_unique<vls::Session>(*model->lm);
    *out = s.release();
    return Status::Ok();
  });
}

void vls_session_free(vls_session* session) {
  try {
    delete session;
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors do not throw; nothing may escape
  }
}

vls_status vls_session_prefill_tokens(vls_session* session, const vls_tensor* tokens,
                                      int32_t position_mode, const vls_tensor* positions,
                                      int32_t rope_delta) {
  return Guard("vls_session_prefill_tokens", [&] {
    return vls::PrefillTokens(session, tokens, position_mode, positions, rope_delta);
  });
}

vls_status vls_session_prefill_embeddings(vls_session* session, const vls_tensor* embeddings,
                                          int32_t position_mode, const vls_tensor* positions,
                                          int32_t rope_delta) {
  return Guard("vls_session_prefill_embeddings", [&] {
    return vls::PrefillEmbeddings(session, embeddings, position_mode, positions, rope_delta);
  });
}

vls_status vls_session_prefill_deepstack(vls_session* session, const vls_tensor* embeddings,
                                         int32_t position_mode, const vls_tensor* positions,
                                         int32_t rope_delta, const vls_tensor* visual_positions,
                                         const vls_tensor* layer_features,
                                         const vls_tensor* layer_indices,
                                         const vls_tensor* token_ids) {
  return Guard("vls_session_prefill_deepstack", [&] {
    return vls::PrefillDeepStack(session, embeddings, position_mode, positions, rope_delta,
                                 visual_positions, layer_features, layer_indices, token_ids);
  });
}

vls_status vls_session_decode(vls_session* session, int32_t token) {
  return Guard("vls_session_decode", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckSession(session));
    if (session->poisoned) {
      return vls::FailedPrecondition(
          "decode: an earlier call failed inside the model, so the KV cache is stale; run a "
          "prefill");
    }
    return vls::RunAndCommit(session, [&](std::vector<float>* logits) {
      return session->session->Decode(token, logits);
    });
  });
}

vls_status vls_session_logits(const vls_session* session, const float** data, uint64_t* count) {
  return Guard("vls_session_logits", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckSession(session));
    if (data == nullptr || count == nullptr) return InvalidArgument("data or count is NULL");
    if (!session->has_logits)
      return vls::FailedPrecondition("no prefill or decode has succeeded yet");
    *data = session->logits.data();
    *count = session->logits.size();
    return Status::Ok();
  });
}

vls_status vls_session_length(const vls_session* session, int32_t* out) {
  return Guard("vls_session_length", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckSession(session));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = session->session->length();
    return Status::Ok();
  });
}

vls_status vls_session_rope_delta(const vls_session* session, int32_t* out) {
  return Guard("vls_session_rope_delta", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckSession(session));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = session->session->rope_delta();
    return Status::Ok();
  });
}

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
    b->engine = std::make_unique<vls::BatchEngine>(
        *model->lm, [raw](const vls::TokenEvent& e) { return raw->OnEvent(e); });
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
    return vls::SubmitTokens(batch, tokens, position_mode, positions, rope_delta, options, out_id);
  });
}

vls_status vls_batch_submit_embeddings(vls_batch* batch, const vls_tensor* embeddings,
                                       int32_t position_mode, const vls_tensor* positions,
                                       int32_t rope_delta, const vls_tensor* token_ids,
                                       const vls_request_options* options, uint64_t* out_id) {
  return Guard("vls_batch_submit_embeddings", [&] {
    return vls::SubmitEmbeddings(batch, embeddings, position_mode, positions, rope_delta, token_ids,
                                 options, out_id);
  });
}

vls_status vls_batch_submit_deepstack(vls_batch* batch, const vls_tensor* embeddings,
                                      int32_t position_mode, const vls_tensor* positions,
                                      int32_t rope_delta, const vls_tensor* visual_positions,
                                      const vls_tensor* layer_features,
                                      const vls_tensor* layer_indices, const vls_tensor* token_ids,
                                      const vls_request_options* options, uint64_t* out_id) {
  return Guard("vls_batch_submit_deepstack", [&] {
    return vls::SubmitDeepStack(batch, embeddings, position_mode, positions, rope_delta,
                                visual_positions, layer_features, layer_indices, token_ids, options,
                                out_id);
  });
}

vls_status vls_batch_cancel(vls_batch* batch, uint64_t id) {
  return Guard("vls_batch_cancel", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    return batch->engine->Cancel(id);
  });
}

vls_status vls_batch_step(vls_batch* batch, vls_token_event* events, size_t capacity,
                          size_t* count) {
  return Guard("vls_batch_step", [&] {
    return vls::StepAndDrain(batch, events, capacity, count, [&] { batch->engine->Step(); });
  });
}

vls_status vls_batch_admit(vls_batch* batch, vls_token_event* events, size_t capacity,
                           size_t* count) {
  return Guard("vls_batch_admit", [&] {
    return vls::StepAndDrain(batch, events, capacity, count,
                             [&] { batch->engine->AdmitPending(); });
  });
}

vls_status vls_batch_run_until_idle(vls_batch* batch) {
  return Guard("vls_batch_run_until_idle", [&] {
    size_t none = 0;
    return vls::StepAndDrain(batch, nullptr, 0, &none, [&] { batch->engine->RunUntilIdle(); });
  });
}

vls_status vls_batch_poll(vls_batch* batch, vls_token_event* events, size_t capacity,
                          size_t* count) {
  return Guard("vls_batch_poll", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    VLS_RETURN_IF_ERROR(vls::CheckEventsArgs(events, capacity, count));
    *count = batch->Drain(events, capacity);
    return Status::Ok();
  });
}

vls_status vls_batch_wait(vls_batch* batch, int32_t timeout_ms, vls_token_event* events,
                          size_t capacity, size_t* count) {
  return Guard("vls_batch_wait", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    VLS_RETURN_IF_ERROR(vls::CheckEventsArgs(events, capacity, count));
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
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    std::lock_guard<std::mutex> lock(batch->run_mu);
    if (batch->threaded) return Status::Ok();
    batch->thread = std::thread([batch] { batch->Loop(); });
    batch->threaded = true;
    return Status::Ok();
  });
}

vls_status vls_batch_stop(vls_batch* batch) {
  return Guard("vls_batch_stop", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    std::lock_guard<std::mutex> lock(batch->run_mu);
    batch->StopThread();
    batch->threaded = false;
    return Status::Ok();
  });
}

vls_status vls_batch_pending_count(const vls_batch* batch, size_t* out) {
  return Guard("vls_batch_pending_count", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = batch->engine->pending_count();
    return Status::Ok();
  });
}

vls_status vls_batch_active_count(const vls_batch* batch, size_t* out) {
  return Guard("vls_batch_active_count", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = batch->engine->active_count();
    return Status::Ok();
  });
}

vls_status vls_batch_pending_bytes(const vls_batch* batch, uint64_t* out) {
  return Guard("vls_batch_pending_bytes", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = batch->engine->pending_bytes();
    return Status::Ok();
  });
}

vls_status vls_batch_buffered_count(const vls_batch* batch, size_t* out) {
  return Guard("vls_batch_buffered_count", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    std::lock_guard<std::mutex> lock(batch->events_mu);
    *out = batch->events.size();
    return Status::Ok();
  });
}

vls_status vls_batch_next_coordinate(const vls_batch* batch, uint64_t id, int32_t out[3]) {
  return Guard("vls_batch_next_coordinate", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
    if (out == nullptr) return InvalidArgument("out is NULL");
    const std::optional<vls::RopeCoord> c = batch->engine->NextCoordinate(id);
    if (!c) return vls::NotFound("request " + std::to_string(id) + " is not active");
    for (size_t i = 0; i < 3; ++i) out[i] = (*c)[i];
    return Status::Ok();
  });
}

vls_status vls_batch_slot_of(const vls_batch* batch, uint64_t id, int32_t* out) {
  return Guard("vls_batch_slot_of", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
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
    VLS_RETURN_IF_ERROR(vls::CheckBatch(batch));
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
