// The Qwen3-VL vision tower's configuration: config.json's `vision_config` (docs/contracts.md
// §D.1).
//
// Parsed from untrusted text under io/untrusted_json.h and the size bounds of
// model/qwen3_config.h; every refusal names the key ("config.json: vision_config.num_heads: 3
// does not divide hidden_size 32").
#ifndef VLSTACK_VISION_VISION_CONFIG_H_
#define VLSTACK_VISION_VISION_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/qwen3_config.h"

namespace vls {

struct VisionConfig {
  int depth = 0;         // vision blocks
  int hidden = 0;        // Dv
  int intermediate = 0;  // Iv
  int heads = 0;
  int in_channels = 3;
  int patch_size = 16;  // P
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;                 // m: m² patches merge into one language-model token
  int num_position_embeddings = 0;            // a perfect square G² (grid side G = sqrt)
  int out_hidden = 0;                         // O; equals the text hidden size H
  std::vector<int> deepstack_visual_indexes;  // strictly increasing, each in [0, depth)
  // The checkpoint's quantization_config (Qwen3Config::fp8, copied by ParseVisionConfig): the
  // tower's Linear weights may be FP8 under it (vision_weights.h).
  std::optional<Fp8Quantization> fp8;

  int head_dim() const { return hidden / heads; }
  int64_t patch_dim() const {
    return int64_t{in_channels} * temporal_patch_size * patch_size * patch_size;
  }
  int pos_grid_side() const;  // G
  int merge_unit() const { return spatial_merge_size * spatial_merge_size; }
  int64_t merged_dim() const { return int64_t{merge_unit()} * hidden; }  // m²·Dv
};

// Parses config.json's vision_config (`label` names the file in errors). nullopt when the
// config declares no vision tower (model_type other than "qwen3_vl" or "qwen3_vl_moe", or no
// vision_config).
// Rules: depth, hidden_size, intermediate_size, num_heads, num_position_embeddings and
// out_hidden_size required and within the model/qwen3_config.h bounds; hidden_size divisible
// by num_heads with a head_dim divisible by 4 (2-D rotary); hidden_act "gelu_pytorch_tanh";
// in_channels 3; num_position_embeddings a perfect square; out_hidden_size equal to the text
// hidden size; deepstack_visual_indexes strictly increasing in [0, depth), as many as the text
// config's DeepStack target layers (0 when it declares none); interpolation_mode "bilinear"
// and interpolation_align_corners true when given.
StatusOr<std::optional<VisionConfig>> ParseVisionConfig(const std::string& json_text,
                                                        const std::string& label,
                                                        const Qwen3Config& text);
// Reads `dir/config.json` (at most kMaxConfigJsonBytes) and parses it as above.
StatusOr<std::optional<VisionConfig>> LoadVisionConfig(const std::string& dir,
                                                       const Qwen3Config& text);

// Canonical one-line-per-field text, for the artifact identity.
std::string CanonicalVisionConfigText(const VisionConfig& cfg);

}  // namespace vls

#endif  // VLSTACK_VISION_VISION_CONFIG_H_
