#include "runtime/deepstack.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/checked_math.h"

namespace vls {
namespace {

constexpr DeepStackRule kAllRules[] = {DeepStackRule::kDType,
                                       DeepStackRule::kRank,
                                       DeepStackRule::kEmptyLayerSet,
                                       DeepStackRule::kShape,
                                       DeepStackRule::kByteCount,
                                       DeepStackRule::kPositionsNotSorted,
                                       DeepStackRule::kPositionOutOfRange,
                                       DeepStackRule::kVisualCountMismatch,
                                       DeepStackRule::kNegativeLayer,
                                       DeepStackRule::kNonFiniteFeature,
                                       DeepStackRule::kStaticMaxOverflow,
                                       DeepStackRule::kHiddenMismatch,
                                       DeepStackRule::kLayerContract,
                                       DeepStackRule::kPositionMode,
                                       DeepStackRule::kNotDeclared};

std::string ListText(std::span<const int32_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

Status CheckBytes(const char* tensor, const TensorView& t) {
  auto want = CheckedByteCount(t.shape, 4);
  if (!want) {
    return DeepStackError(DeepStackRule::kByteCount,
                          std::string(tensor) + ": shape " + ShapeToString(t.shape) + " overflows");
  }
  if (*want != t.nbytes) {
    return DeepStackError(DeepStackRule::kByteCount,
                          std::string(tensor) + ": shape " + ShapeToString(t.shape) + " needs " +
                              std::to_string(*want) + " bytes, got " + std::to_string(t.nbytes));
  }
  if (t.nbytes > 0 && t.data == nullptr) {
    return DeepStackError(DeepStackRule::kByteCount,
                          std::string(tensor) + ": data pointer is null");
  }
  return Status::Ok();
}

}  // namespace

const char* DeepStackRuleName(DeepStackRule rule) {
  switch (rule) {
    case DeepStackRule::kDType: return "dtype";
    case DeepStackRule::kRank: return "rank";
    case DeepStackRule::kEmptyLayerSet: return "empty_layer_set";
    case DeepStackRule::kShape: return "shape";
    case DeepStackRule::kByteCount: return "byte_count";
    case DeepStackRule::kPositionsNotSorted: return "positions_not_sorted";
    case DeepStackRule::kPositionOutOfRange: return "position_out_of_range";
    case DeepStackRule::kVisualCountMismatch: return "visual_count_mismatch";
    case DeepStackRule::kNegativeLayer: return "negative_layer";
    case DeepStackRule::kNonFiniteFeature: return "non_finite_feature";
    case DeepStackRule::kStaticMaxOverflow: return "static_max_overflow";
    case DeepStackRule::kHiddenMismatch: return "hidden_mismatch";
    case DeepStackRule::kLayerContract: return "layer_contract";
    case DeepStackRule::kPositionMode: return "position_mode";
    case DeepStackRule::kNotDeclared: return "not_declared";
  }
  return "unknown";
}

Status DeepStackError(DeepStackRule rule, const std::string& detail) {
  return InvalidArgument(std::string("deepstack.") + DeepStackRuleName(rule) + ": " + detail);
}

std::optional<DeepStackRule> DeepStackRuleOf(const Status& status) {
  const std::string& m = status.message();
  if (m.rfind("deepstack.", 0) != 0) return std::nullopt;
  const size_t colon = m.find(':');
  const std::string name =
      m.substr(10, colon == std::string::npos ? std::string::npos : colon - 10);
  for (DeepStackRule r : kAllRules) {
    if (name == DeepStackRuleName(r)) return r;
  }
  return std::nullopt;
}

StatusOr<DeepStackPayload> DeepStackPayload::Create(const TensorView& positions,
                                                    const TensorView& features,
                                                    const TensorView& layers) {
  if (positions.dtype != DType::kI32) {
    return DeepStackError(DeepStackRule::kDType, "visual_positions must be I32, got " +
                                                     std::string(DTypeName(positions.dtype)));
  }
  if (layers.dtype != DType::kI32) {
    return DeepStackError(DeepStackRule::kDType,
                          "layer_indices must be I32, got " + std::string(DTypeName(layers.dtype)));
  }
  if (features.dtype != DType::kF32) {
    return DeepStackError(DeepStackRule::kDType, "layer_features must be F32, got " +
                                                     std::string(DTypeName(features.dtype)));
  }
  if (positions.shape.size() != 1) {
    return DeepStackError(DeepStackRule::kRank,
                          "visual_positions must be [Nv], got " + ShapeToString(positions.shape));
  }
  if (layers.shape.size() != 1) {
    return DeepStackError(DeepStackRule::kRank,
                          "layer_indices must be [K], got " + ShapeToString(layers.shape));
  }
  if (features.shape.size() != 3) {
    return DeepStackError(DeepStackRule::kRank,
                          "layer_features must be [K,Nv,H], got " + ShapeToString(features.shape));
  }
  const int64_t K = layers.shape[0], Nv = positions.shape[0];
  if (K <= 0)
    return DeepStackError(DeepStackRule::kEmptyLayerSet, "layer_indices is empty (K = 0)");
  if (Nv < 0 || features.shape[0] != K || features.shape[1] != Nv || features.shape[2] <= 0) {
    return DeepStackError(DeepStackRule::kShape, "layer_features is " +
                                                     ShapeToString(features.shape) +
                                                     " but must be [K=" + std::to_string(K) +
                                                     ",Nv=" + std::to_string(Nv) + ",H>0]");
  }
  VLS_RETURN_IF_ERROR(CheckBytes("visual_positions", positions));
  VLS_RETURN_IF_ERROR(CheckBytes("layer_features", features));
  VLS_RETURN_IF_ERROR(CheckBytes("layer_indices", layers));
  DeepStackPayload p;
  p.positions_ = HostTensor::Copy(positions);
  p.features_ = HostTensor::Copy(features);
  p.layer_indices_ = HostTensor::Copy(layers);
  return p;
}

DeepStackPayload DeepStackPayload::Slice(int64_t begin, int64_t end) const {
  const auto pos = positions();
  // Positions are strictly increasing (validated), so the range is one run of entries.
  const auto first = std::lower_bound(pos.begin(), pos.end(), begin);
  const auto last = std::lower_bound(first, pos.end(), end);
  const auto v0 = static_cast<int64_t>(first - pos.begin());
  const auto n = static_cast<int64_t>(last - first);
  const int64_t K = num_layers(), H = hidden();
  std::vector<int32_t> rebased(static_cast<size_t>(n));
  for (int64_t v = 0; v < n; ++v) {
    rebased[static_cast<size_t>(v)] =
        static_cast<int32_t>(pos[static_cast<size_t>(v0 + v)] - begin);
  }
  DeepStackPayload out;
  out.positions_ = HostTensor::FromI32({n}, rebased);
  out.features_ = HostTensor(DType::kF32, {K, n, H});
  for (int64_t k = 0; k < K; ++k) {
    std::copy_n(features(k) + v0 * H, n * H, out.features_.f32() + k * n * H);
  }
  out.layer_indices_ = HostTensor::Copy(layer_indices_.view());
  return out;
}

Status ValidateDeepStackRequest(const DeepStackPayload& p, const DeepStackRequestFacts& f) {
  const auto pos = p.positions();
  for (size_t i = 1; i < pos.size(); ++i) {
    if (pos[i] <= pos[i - 1]) {
      return DeepStackError(DeepStackRule::kPositionsNotSorted,
                            "visual_positions must be strictly increasing; [" +
                                std::to_string(i - 1) + "]=" + std::to_string(pos[i - 1]) +
                                " then [" + std::to_string(i) + "]=" + std::to_string(pos[i]));
    }
  }
  for (size_t i = 0; i < pos.size(); ++i) {
    if (pos[i] < 0 || pos[i] >= f.sequence_length) {
      return DeepStackError(
          DeepStackRule::kPositionOutOfRange,
          "visual_positions[" + std::to_string(i) + "]=" + std::to_string(pos[i]) +
              " is outside the expanded sequence [0," + std::to_string(f.sequence_length) + ")");
    }
  }
  if (f.token_ids) {
    // The positions must be exactly those of the image/video pad tokens (the visual mask).
    std::vector<int32_t> pads;
    for (size_t s = 0; s < f.token_ids->size(); ++s) {
      const int32_t t = (*f.token_ids)[s];
      if (t == f.image_token_id || t == f.video_token_id) pads.push_back(static_cast<int32_t>(s));
    }
    if (static_cast<int64_t>(pads.size()) != p.num_visual()) {
      return DeepStackError(DeepStackRule::kVisualCountMismatch,
                            "input_ids hold " + std::to_string(pads.size()) +
                                " image/video pad tokens but visual_positions has Nv=" +
                                std::to_string(p.num_visual()));
    }
    if (!std::equal(pads.begin(), pads.end(), pos.begin())) {
      return DeepStackError(DeepStackRule::kVisualCountMismatch,
                            "visual_positions " + ListText(pos) +
                                " differ from the image/video pad token positions " +
                                ListText(pads));
    }
  }
  if (f.declared_visual_tokens && *f.declared_visual_tokens != p.num_visual()) {
    return DeepStackError(
        DeepStackRule::kVisualCountMismatch,
        "the request declares " + std::to_string(*f.declared_visual_tokens) +
            " visual tokens but visual_positions has Nv=" + std::to_string(p.num_visual()));
  }
  const auto layers = p.layer_indices();
  for (size_t k = 0; k < layers.size(); ++k) {
    if (layers[k] < 0) {
      return DeepStackError(
          DeepStackRule::kNegativeLayer,
          "layer_indices[" + std::to_string(k) + "]=" + std::to_string(layers[k]) + " is negative");
    }
  }
  const int64_t n = p.num_layers() * p.num_visual() * p.hidden();
  const float* feat = p.features(0);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(feat[i])) {
      const int64_t per_k = p.num_visual() * p.hidden();
      return DeepStackError(DeepStackRule::kNonFiniteFeature,
                            "layer_features[" + std::to_string(i / per_k) + "," +
                                std::to_string((i % per_k) / p.hidden()) + "," +
                                std::to_string(i % p.hidden()) + "] is " +
                                (std::isnan(feat[i]) ? "NaN" : "infinite"));
    }
  }
  return Status::Ok();
}

Status ValidateDeepStackForModel(const DeepStackPayload& p, const Qwen3Config& cfg, int nmax,
                                 PositionMode request_mode) {
  if (!cfg.deepstack) {
    return DeepStackError(
        DeepStackRule::kNotDeclared,
        "the model declares no DeepStack layers, so it has no DeepStack prefill entry");
  }
  if (p.num_visual() > nmax) {
    return DeepStackError(
        DeepStackRule::kStaticMaxOverflow,
        "Nv=" + std::to_string(p.num_visual()) + " exceeds Nmax=" + std::to_string(nmax));
  }
  if (p.hidden() != cfg.hidden) {
    return DeepStackError(DeepStackRule::kHiddenMismatch,
                          "layer_features hidden " + std::to_string(p.hidden()) +
                              " differs from the model's " + std::to_string(cfg.hidden));
  }
  const auto& want = cfg.deepstack->target_layers;
  const auto got = p.layer_indices();
  if (!std::equal(got.begin(), got.end(), want.begin(), want.end())) {
    std::vector<int32_t> w(want.begin(), want.end());
    return DeepStackError(DeepStackRule::kLayerContract,
                          "layer_indices " + ListText(got) +
                              " do not match the model's target layers " + ListText(w));
  }
  if (request_mode != cfg.position_mode) {
    return DeepStackError(DeepStackRule::kPositionMode, std::string("the request uses ") +
                                                            PositionModeName(request_mode) +
                                                            " positions but the model uses " +
                                                            PositionModeName(cfg.position_mode));
  }
  return Status::Ok();
}

void DeepStackHook::AfterLayer(int layer, float* x, int64_t M) {
  const auto layers = payload_.layer_indices();
  for (size_t k = 0; k < layers.size(); ++k) {
    if (layers[k] != layer) continue;
    const float* feat = payload_.features(static_cast<int64_t>(k));  // [Nv, H]
    const auto pos = payload_.positions();
    for (size_t v = 0; v < pos.size(); ++v) {
      if (pos[v] >= M) continue;  // validated away; defensive for a mis-sized pass
      float* row = x + static_cast<int64_t>(pos[v]) * hidden_;
      const float* f = feat + static_cast<int64_t>(v) * hidden_;
      for (int64_t h = 0; h < hidden_; ++h) row[h] += f[h];
    }
  }
}

}  // namespace vls
