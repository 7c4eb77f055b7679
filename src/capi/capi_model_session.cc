// The C ABI's model and session entry points (vls_model_*, vls_session_*).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "capi/capi_internal.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/session.h"
#include "vlstack/vlstack.h"

namespace vls::capi {
namespace {

// The sizes of the ABI 1 structs: a smaller struct_size is refused.
constexpr uint32_t kModelOptionsV1Size = 20;
constexpr uint32_t kModelDescV1Size = 64;
static_assert(sizeof(vls_model_options) >= kModelOptionsV1Size);
static_assert(sizeof(vls_model_desc) >= kModelDescV1Size);

Status CheckSession(const vls_session* s) {
  if (s == nullptr || s->session == nullptr) return InvalidArgument("session is NULL");
  return Status::Ok();
}

// Runs a session call on a scratch logits vector and commits the logits only on success. (A
// session whose model run threw resets itself and reports the failure as a status: decode is
// then refused until a prefill succeeds.)
template <typename F>
Status RunAndCommit(vls_session* s, F&& call) {
  std::vector<float> logits;
  Status st = call(&logits);
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
  // The session validates every value rule (ValidatePrompt) before it runs anything.
  return RunAndCommit(s, [&](std::vector<float>* logits) {
    return s->session->PrefillEmbeddings(emb, pos, delta, PrefillOptions{}, logits);
  });
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

  // Layers 2-3 through the C++ validator (ValidatePrompt), which the session runs before
  // anything executes.
  const auto emb = Values<float>(*embeddings);
  PromptView prompt;
  prompt.embeddings = emb;
  prompt.positions = &pos;
  prompt.rope_delta = delta;
  prompt.deepstack = &payload;
  if (ids) prompt.tokens = *ids;
  return RunAndCommit(s, [&](std::vector<float>* logits) {
    return s->session->Prefill(prompt, PrefillOptions{}, logits);
  });
}

}  // namespace
}  // namespace vls::capi

using vls::InvalidArgument;
using vls::Status;
using vls::capi::Guard;

extern "C" {

vls_model_options vls_model_default_options(void) {
  vls_model_options o;
  std::memset(&o, 0, sizeof(o));
  const vls::LoadOptions d;
  o.struct_size = sizeof(vls_model_options);
  o.capacity = d.capacity;
  o.slots = d.slots;
  o.nmax = d.nmax;
  o.threads = d.threads;
  o.precision = VLS_PRECISION_F32;
  o.artifact = nullptr;
  o.kv_cache = VLS_KV_CACHE_DEFAULT;
  o.artifact_memory = VLS_ARTIFACT_MEMORY_COPY;
  return o;
}

vls_status vls_model_load(const char* dir, const vls_model_options* options, vls_model** out) {
  return Guard("vls_model_load", [&]() -> Status {
    if (dir == nullptr) return InvalidArgument("dir is NULL");
    if (out == nullptr) return InvalidArgument("out is NULL");
    vls_model_options o = vls_model_default_options();
    if (options != nullptr) {
      if (options->struct_size < vls::capi::kModelOptionsV1Size) {
        return InvalidArgument("options.struct_size " + std::to_string(options->struct_size) +
                               " is smaller than the ABI 1 vls_model_options (" +
                               std::to_string(vls::capi::kModelOptionsV1Size) + " bytes)");
      }
      // Only the prefix this library knows; a newer caller's extra fields are ignored.
      std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof(o)));
      // Fields past the caller's struct_size keep their defaults, never half-copied.
      if (options->struct_size < offsetof(vls_model_options, precision) + sizeof(int32_t)) {
        o.precision = VLS_PRECISION_F32;
      }
      if (options->struct_size < offsetof(vls_model_options, artifact) + sizeof(const char*)) {
        o.artifact = nullptr;
      }
      if (options->struct_size < offsetof(vls_model_options, kv_cache) + sizeof(int32_t)) {
        o.kv_cache = VLS_KV_CACHE_DEFAULT;
      }
      if (options->struct_size < offsetof(vls_model_options, artifact_memory) + sizeof(int64_t)) {
        o.artifact_memory = VLS_ARTIFACT_MEMORY_COPY;
      }
    }
    vls::LoadOptions lo;
    lo.capacity = o.capacity;
    lo.slots = o.slots;
    lo.nmax = o.nmax;
    lo.threads = o.threads;
    if (o.precision == VLS_PRECISION_F32) {
      lo.precision = vls::kernels::Precision::kF32;
    } else if (o.precision == VLS_PRECISION_BF16) {
      lo.precision = vls::kernels::Precision::kBF16;
    } else if (o.precision == VLS_PRECISION_INT8) {
      lo.precision = vls::kernels::Precision::kInt8;
    } else if (o.precision == VLS_PRECISION_INT4) {
      lo.precision = vls::kernels::Precision::kInt4;
    } else {
      return InvalidArgument("options.precision " + std::to_string(o.precision) +
                             " is not VLS_PRECISION_F32 (0), _BF16 (1), _INT8 (2) or _INT4 (3)");
    }
    if (o.kv_cache == VLS_KV_CACHE_F32) {
      lo.kv_dtype = vls::KvDType::kF32;
    } else if (o.kv_cache == VLS_KV_CACHE_BF16) {
      lo.kv_dtype = vls::KvDType::kBf16;
    } else if (o.kv_cache != VLS_KV_CACHE_DEFAULT) {
      return InvalidArgument("options.kv_cache " + std::to_string(o.kv_cache) +
                             " is not VLS_KV_CACHE_DEFAULT (0), _F32 (1) or _BF16 (2)");
    }
    if (o.artifact_memory == VLS_ARTIFACT_MEMORY_COPY) {
      lo.artifact_memory = vls::ArtifactMemory::kCopy;
    } else if (o.artifact_memory == VLS_ARTIFACT_MEMORY_MAP) {
      lo.artifact_memory = vls::ArtifactMemory::kMap;
    } else {
      return InvalidArgument("options.artifact_memory " + std::to_string(o.artifact_memory) +
                             " is not VLS_ARTIFACT_MEMORY_COPY (0) or _MAP (1)");
    }
    if (o.artifact != nullptr) lo.artifact = o.artifact;
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<vls::LoadedModel> lm, vls::LoadedModel::Load(dir, lo));
    auto m = std::make_unique<vls_model>();
    m->lm = std::move(lm);
    *out = m.release();
    return Status::Ok();
  });
}

vls_status vls_model_write_artifact(const vls_model* model, const char* path) {
  return Guard("vls_model_write_artifact", [&]() -> Status {
    if (model == nullptr) return InvalidArgument("model is NULL");
    if (path == nullptr) return InvalidArgument("path is NULL");
    return model->lm->WriteArtifact(path, nullptr);
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
    if (out->struct_size < vls::capi::kModelDescV1Size) {
      return InvalidArgument("out->struct_size " + std::to_string(out->struct_size) +
                             " is smaller than the ABI 1 vls_model_desc (" +
                             std::to_string(vls::capi::kModelDescV1Size) + " bytes)");
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
    VLS_ASSIGN_OR_RETURN(s->session, vls::Session::Create(*model->lm));
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
    return vls::capi::PrefillTokens(session, tokens, position_mode, positions, rope_delta);
  });
}

vls_status vls_session_prefill_embeddings(vls_session* session, const vls_tensor* embeddings,
                                          int32_t position_mode, const vls_tensor* positions,
                                          int32_t rope_delta) {
  return Guard("vls_session_prefill_embeddings", [&] {
    return vls::capi::PrefillEmbeddings(session, embeddings, position_mode, positions, rope_delta);
  });
}

vls_status vls_session_prefill_deepstack(vls_session* session, const vls_tensor* embeddings,
                                         int32_t position_mode, const vls_tensor* positions,
                                         int32_t rope_delta, const vls_tensor* visual_positions,
                                         const vls_tensor* layer_features,
                                         const vls_tensor* layer_indices,
                                         const vls_tensor* token_ids) {
  return Guard("vls_session_prefill_deepstack", [&] {
    return vls::capi::PrefillDeepStack(session, embeddings, position_mode, positions, rope_delta,
                                       visual_positions, layer_features, layer_indices, token_ids);
  });
}

vls_status vls_session_decode(vls_session* session, int32_t token) {
  return Guard("vls_session_decode", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckSession(session));
    return vls::capi::RunAndCommit(session, [&](std::vector<float>* logits) {
      return session->session->Decode(token, logits);
    });
  });
}

vls_status vls_session_logits(const vls_session* session, const float** data, uint64_t* count) {
  return Guard("vls_session_logits", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckSession(session));
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
    VLS_RETURN_IF_ERROR(vls::capi::CheckSession(session));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = session->session->length();
    return Status::Ok();
  });
}

vls_status vls_session_rope_delta(const vls_session* session, int32_t* out) {
  return Guard("vls_session_rope_delta", [&]() -> Status {
    VLS_RETURN_IF_ERROR(vls::capi::CheckSession(session));
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = session->session->rope_delta();
    return Status::Ok();
  });
}

}  // extern "C"
