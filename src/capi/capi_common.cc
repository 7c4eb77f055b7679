// The C ABI's shared part: the ABI version, the thread's last error, status names, and the
// raw-descriptor checks that the session prefills and the batch submits both run.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "base/checked_math.h"
#include "base/status.h"
#include "capi/capi_internal.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "tokenizer/utf8.h"
#include "vlstack/vlstack.h"

namespace vls::capi {
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

thread_local std::string g_last_error;

}  // namespace

vls_status Fail(const char* fn, const Status& s) noexcept {
  // The message may quote input (a request, a file name, an exception's bytes): valid UTF-8 on
  // the way out. Out of memory here leaves a fixed text rather than throwing out of the ABI.
  try {
    g_last_error = tok::SanitizeUtf8(std::string(fn) + ": " + s.message());
  } catch (...) {
    g_last_error.clear();
    g_last_error.shrink_to_fit();
    static constexpr const char* kNoMemory = "out of memory while reporting an error";
    try {
      g_last_error = kNoMemory;
    } catch (...) {  // NOLINT(bugprone-empty-catch): the error text stays empty
    }
  }
  return static_cast<vls_status>(s.code());
}

vls_status Finish(const char* fn, const Status& s) noexcept {
  if (s.ok()) {
    g_last_error.clear();
    return VLS_OK;
  }
  return Fail(fn, s);
}

namespace {

// How a descriptor failure is reported: DeepStack tensors name the layer-1 rule of
// docs/contracts.md §2 ("deepstack.<rule>: ..."), other tensors an "abi.<rule>" of their own.
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

}  // namespace

// The ABI's own descriptor check. `want` holds the expected dims (kAnyDim: any size >= 0);
// its size is the expected rank.
Status CheckDescriptor(const vls_tensor* t, const char* tensor, int32_t dtype,
                       std::initializer_list<int64_t> want, bool deepstack) {
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

}  // namespace vls::capi

extern "C" {

uint32_t vls_abi_version(void) { return static_cast<uint32_t>(vls::kAbiVersion); }

const char* vls_last_error(void) { return vls::capi::g_last_error.c_str(); }

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

}  // extern "C"
