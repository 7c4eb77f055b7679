// The C ABI (include/vlstack/vlstack.h) over the C++ runtime.
//
// Defense in depth (CONTRACTS §2 layer 4): every descriptor is checked here, on the raw
// pointers, before any C++ object is built from it; the value rules then go through the same
// validators the C++ API uses, explicitly, before the session runs anything. Every entry point
// catches everything, so no exception leaves the library.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/checked_math.h"
#include "base/status.h"
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

Status PrefillDeepStack(vls_session* s, const vls_tensor* embeddings, int32_t mode,
                        const vls_tensor* positions, int32_t delta,
                        const vls_tensor* visual_positions, const vls_tensor* layer_features,
                        const vls_tensor* layer_indices, const vls_tensor* token_ids) {
  VLS_RETURN_IF_ERROR(CheckSession(s));
  const LoadedModel& lm = *s->model->lm;
  const Qwen3Config& cfg = lm.config();
  if (!cfg.deepstack) {
    return DeepStackError(
        DeepStackRule::kNotDeclared,
        "the model declares no DeepStack layers, so it has no DeepStack prefill entry");
  }
  VLS_RETURN_IF_ERROR(CheckMode(mode, cfg, true));
  VLS_RETURN_IF_ERROR(
      CheckDescriptor(embeddings, "embeddings", VLS_DTYPE_F32, {kAnyDim, cfg.hidden}));
  const int64_t S = embeddings->dims[0];
  VLS_RETURN_IF_ERROR(CheckLength("embeddings", S, s->session->capacity()));
  VLS_ASSIGN_OR_RETURN(PositionIds pos, ReadPositions(positions, cfg.position_mode, S));

  // Layer 1 on the raw descriptors, with the static bounds checked before any copy.
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
  std::optional<std::span<const int32_t>> ids;
  if (token_ids != nullptr) {
    VLS_RETURN_IF_ERROR(CheckDescriptor(token_ids, "token_ids", VLS_DTYPE_I32, {S}));
    ids = Values<int32_t>(*token_ids);
  }

  // Layers 1-3 through the C++ validators, before the session runs anything.
  // An empty tensor may come with a NULL pointer; the payload copy gets a valid one.
  static const int32_t kEmpty = 0;
  auto view = [](const vls_tensor& t, DType dtype) {
    Shape shape(t.dims, t.dims + t.rank);
    const void* data = t.data != nullptr ? t.data : &kEmpty;
    return TensorView{dtype, shape, static_cast<const std::byte*>(data),
                      static_cast<size_t>(t.byte_length)};
  };
  VLS_ASSIGN_OR_RETURN(DeepStackPayload payload,
                       DeepStackPayload::Create(view(*visual_positions, DType::kI32),
                                                view(*layer_features, DType::kF32),
                                                view(*layer_indices, DType::kI32)));
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

}  // extern "C"
