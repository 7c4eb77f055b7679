#include "vision/vision_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/file.h"
#include "io/untrusted_json.h"

namespace vls {
namespace {

using Json = nlohmann::json;

// The vision_config object and the file label, for errors that name "label: vision_config.key".
struct VisionObj {
  const Json* j;
  std::string label;

  std::string Key(const std::string& k) const { return label + ": vision_config." + k; }
  Status Err(const std::string& k, const std::string& what) const {
    return InvalidArgument(Key(k) + ": " + what);
  }
  // The value of `k`, or nullptr when absent or null (HF writes None as null).
  const Json* Get(const std::string& k) const {
    auto it = j->find(k);
    if (it == j->end() || it->is_null()) return nullptr;
    return &*it;
  }
  StatusOr<int> Int(const std::string& k, std::optional<int> def, int64_t lo, int64_t hi) const {
    const Json* v = Get(k);
    if (!v) {
      if (def) return *def;
      return Err(k, "required key is missing");
    }
    int64_t x = 0;
    VLS_RETURN_IF_ERROR(ReadJsonInt(*v, Key(k), lo, hi, &x));
    return static_cast<int>(x);
  }
};

// Largest patch side and temporal patch accepted (the text config's vision bounds).
constexpr int kMaxPatchSize = 1024;
constexpr int kMaxTemporalPatch = 64;
constexpr int kMaxMergeSize = 64;

Status CheckMatrix(const VisionObj& v, const std::string& what, int64_t rows, int64_t cols) {
  // rows, cols <= 2^32 each here, so the product fits int64.
  if (rows * cols > kMaxWeightElements) {
    return InvalidArgument(v.label + ": vision_config: " + what + " = " + std::to_string(rows) +
                           " x " + std::to_string(cols) +
                           " elements in one weight matrix exceeds the bound " +
                           std::to_string(kMaxWeightElements) + " (kMaxWeightElements)");
  }
  return Status::Ok();
}

Status ParseDeepStackIndexes(const VisionObj& v, const Qwen3Config& text, VisionConfig& cfg) {
  const size_t declared = text.deepstack ? text.deepstack->target_layers.size() : 0;
  if (const Json* list = v.Get("deepstack_visual_indexes")) {
    if (!list->is_array()) return v.Err("deepstack_visual_indexes", "expected a list");
    if (list->size() > static_cast<size_t>(cfg.depth)) {
      return v.Err("deepstack_visual_indexes", "lists " + std::to_string(list->size()) +
                                                   " blocks but depth is " +
                                                   std::to_string(cfg.depth));
    }
    for (const Json& e : *list) {
      int64_t j = 0;
      VLS_RETURN_IF_ERROR(ReadJsonInt(e, v.Key("deepstack_visual_indexes"), 0, cfg.depth - 1, &j));
      if (!cfg.deepstack_visual_indexes.empty() && j <= cfg.deepstack_visual_indexes.back()) {
        return v.Err("deepstack_visual_indexes",
                     "must be strictly increasing (" + std::to_string(j) + " follows " +
                         std::to_string(cfg.deepstack_visual_indexes.back()) + ")");
      }
      cfg.deepstack_visual_indexes.push_back(static_cast<int>(j));
    }
  }
  if (cfg.deepstack_visual_indexes.size() != declared) {
    return v.Err("deepstack_visual_indexes",
                 "lists " + std::to_string(cfg.deepstack_visual_indexes.size()) +
                     " vision blocks but the text config declares " + std::to_string(declared) +
                     " DeepStack target layers");
  }
  return Status::Ok();
}

StatusOr<VisionConfig> ParseVisionObject(const VisionObj& v, const Qwen3Config& text) {
  VisionConfig c;
  VLS_ASSIGN_OR_RETURN(c.depth, v.Int("depth", std::nullopt, 1, kMaxHiddenLayers));
  VLS_ASSIGN_OR_RETURN(c.hidden, v.Int("hidden_size", std::nullopt, 1, kMaxHiddenSize));
  VLS_ASSIGN_OR_RETURN(c.intermediate,
                       v.Int("intermediate_size", std::nullopt, 1, kMaxIntermediateSize));
  VLS_ASSIGN_OR_RETURN(c.heads, v.Int("num_heads", std::nullopt, 1, kMaxAttentionHeads));
  VLS_ASSIGN_OR_RETURN(c.in_channels, v.Int("in_channels", 3, 1, 16));
  VLS_ASSIGN_OR_RETURN(c.patch_size, v.Int("patch_size", 16, 1, kMaxPatchSize));
  VLS_ASSIGN_OR_RETURN(c.temporal_patch_size,
                       v.Int("temporal_patch_size", 2, 1, kMaxTemporalPatch));
  VLS_ASSIGN_OR_RETURN(c.spatial_merge_size, v.Int("spatial_merge_size", 2, 1, kMaxMergeSize));
  VLS_ASSIGN_OR_RETURN(c.num_position_embeddings,
                       v.Int("num_position_embeddings", std::nullopt, 1, kMaxContextPositions));
  VLS_ASSIGN_OR_RETURN(c.out_hidden, v.Int("out_hidden_size", std::nullopt, 1, kMaxHiddenSize));

  if (c.in_channels != 3) {
    return v.Err("in_channels", std::to_string(c.in_channels) + " is not supported (3: RGB)");
  }
  if (c.hidden % c.heads != 0) {
    return v.Err("num_heads", std::to_string(c.heads) + " does not divide hidden_size " +
                                  std::to_string(c.hidden));
  }
  if (c.head_dim() % 4 != 0) {
    return v.Err("num_heads", "head_dim hidden_size / num_heads = " + std::to_string(c.head_dim()) +
                                  " must be divisible by 4 (2-D rotary embedding)");
  }
  if (c.head_dim() > kMaxHeadDim) {
    return v.Err("num_heads", "head_dim " + std::to_string(c.head_dim()) + " exceeds " +
                                  std::to_string(kMaxHeadDim) + " (kMaxHeadDim)");
  }
  const int side = static_cast<int>(std::lround(std::sqrt(c.num_position_embeddings)));
  if (side * side != c.num_position_embeddings) {
    return v.Err("num_position_embeddings",
                 std::to_string(c.num_position_embeddings) +
                     " is not a perfect square (the learned positions form a square grid)");
  }
  if (c.out_hidden != text.hidden) {
    return v.Err("out_hidden_size", std::to_string(c.out_hidden) +
                                        " differs from the text hidden_size " +
                                        std::to_string(text.hidden));
  }
  if (const Json* act = v.Get("hidden_act")) {
    std::string s;
    VLS_RETURN_IF_ERROR(ReadJsonString(*act, v.Key("hidden_act"), &s));
    if (s != "gelu_pytorch_tanh") {
      return Status(StatusCode::kUnimplemented, v.Key("hidden_act") + ": " + JsonSnippet(*act) +
                                                    " is not supported (gelu_pytorch_tanh)");
    }
  }
  if (const Json* mode = v.Get("interpolation_mode")) {
    std::string s;
    VLS_RETURN_IF_ERROR(ReadJsonString(*mode, v.Key("interpolation_mode"), &s));
    if (s != "bilinear") {
      return Status(
          StatusCode::kUnimplemented,
          v.Key("interpolation_mode") + ": " + JsonSnippet(*mode) + " is not supported (bilinear)");
    }
  }
  if (const Json* ac = v.Get("interpolation_align_corners")) {
    bool b = false;
    VLS_RETURN_IF_ERROR(ReadJsonBool(*ac, v.Key("interpolation_align_corners"), &b));
    if (!b) {
      return Status(StatusCode::kUnimplemented,
                    v.Key("interpolation_align_corners") + ": false is not supported (true)");
    }
  }
  // Every weight matrix within kMaxWeightElements (each dimension is below 2^31 here).
  VLS_RETURN_IF_ERROR(CheckMatrix(v, "patch_embed hidden_size x patch", c.hidden, c.patch_dim()));
  VLS_RETURN_IF_ERROR(CheckMatrix(v, "pos_embed num_position_embeddings x hidden_size",
                                  c.num_position_embeddings, c.hidden));
  VLS_RETURN_IF_ERROR(
      CheckMatrix(v, "mlp intermediate_size x hidden_size", c.intermediate, c.hidden));
  VLS_RETURN_IF_ERROR(
      CheckMatrix(v, "merger (merge² x hidden_size)²", c.merged_dim(), c.merged_dim()));
  VLS_RETURN_IF_ERROR(CheckMatrix(v, "merger out_hidden_size x merge² x hidden_size", c.out_hidden,
                                  c.merged_dim()));
  VLS_RETURN_IF_ERROR(ParseDeepStackIndexes(v, text, c));
  return c;
}

}  // namespace

int VisionConfig::pos_grid_side() const {
  return static_cast<int>(std::lround(std::sqrt(num_position_embeddings)));
}

StatusOr<std::optional<VisionConfig>> ParseVisionConfig(const std::string& json_text,
                                                        const std::string& label,
                                                        const Qwen3Config& text) {
  if (json_text.size() > kMaxConfigJsonBytes) {
    return DataLoss(label + ": larger than " + std::to_string(kMaxConfigJsonBytes) +
                    " bytes (kMaxConfigJsonBytes)");
  }
  Json root;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, json_text, &root));
  if (!root.is_object()) return InvalidArgument(label + ": top level must be a JSON object");
  auto mt = root.find("model_type");
  // qwen3_vl_moe has the same vision tower and DeepStack as qwen3_vl (ADR 0027).
  if (mt == root.end() || !mt->is_string() || (*mt != "qwen3_vl" && *mt != "qwen3_vl_moe")) {
    return std::optional<VisionConfig>();
  }
  auto vc = root.find("vision_config");
  if (vc == root.end() || vc->is_null()) return std::optional<VisionConfig>();
  if (!vc->is_object()) return InvalidArgument(label + ": vision_config: expected an object");
  VLS_ASSIGN_OR_RETURN(VisionConfig c, ParseVisionObject(VisionObj{&*vc, label}, text));
  c.fp8 = text.fp8;  // quantization_config is the whole checkpoint's, parsed with the text's
  return std::optional<VisionConfig>(std::move(c));
}

StatusOr<std::optional<VisionConfig>> LoadVisionConfig(const std::string& dir,
                                                       const Qwen3Config& text) {
  const std::string path = JoinPath(dir, "config.json");
  VLS_ASSIGN_OR_RETURN(std::string json_text, ReadFileAtMost(path, kMaxConfigJsonBytes));
  return ParseVisionConfig(json_text, path, text);
}

std::string CanonicalVisionConfigText(const VisionConfig& c) {
  std::ostringstream o;
  o << "vision.depth=" << c.depth << "\nvision.hidden=" << c.hidden
    << "\nvision.intermediate=" << c.intermediate << "\nvision.heads=" << c.heads
    << "\nvision.in_channels=" << c.in_channels << "\nvision.patch_size=" << c.patch_size
    << "\nvision.temporal_patch_size=" << c.temporal_patch_size
    << "\nvision.spatial_merge_size=" << c.spatial_merge_size
    << "\nvision.num_position_embeddings=" << c.num_position_embeddings
    << "\nvision.out_hidden=" << c.out_hidden << "\nvision.deepstack_visual_indexes=";
  for (size_t i = 0; i < c.deepstack_visual_indexes.size(); ++i) {
    o << (i ? "," : "") << c.deepstack_visual_indexes[i];
  }
  o << "\nvision.hidden_act=gelu_pytorch_tanh\nvision.pos_interpolation=bilinear_align_corners\n";
  return o.str();
}

}  // namespace vls
