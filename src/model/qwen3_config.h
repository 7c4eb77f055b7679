// Qwen3 / Qwen3-VL language-model configuration: parsing and validation of config.json.
//
// Accepts `Qwen3VLForConditionalGeneration` configs (model_type "qwen3_vl", nested
// text_config/vision_config), plain Qwen3 (model_type "qwen3") and their mixture-of-experts
// forms (`Qwen3VLMoeForConditionalGeneration`, model_type "qwen3_vl_moe";
// `Qwen3MoeForCausalLM`, model_type "qwen3_moe"; ADR 0027). Every rule failure names the key,
// e.g. "text_config.num_key_value_heads: 3 does not divide num_attention_heads 8".
#ifndef VLSTACK_MODEL_QWEN3_CONFIG_H_
#define VLSTACK_MODEL_QWEN3_CONFIG_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/quantization_config.h"

namespace vls {

// Bounds on what a model folder's config.json and generation_config.json may declare (issue 15).
// Every size is checked against its bound, and the weight shapes it implies against
// kMaxWeightElements and kMaxModelParameters, before anything is sized from it; a refusal names
// the key, the value and the bound ("config.json: text_config.hidden_size must be an integer in
// [1, 65536], not 100000"). The bounds sit far above every released Qwen3 / Qwen3-VL model
// (largest dense: hidden 5120, intermediate 25600, 64 layers, 64 heads, head_dim 128, vocab
// 151936, 262144 positions) and keep every product of two or three of them inside int64.
inline constexpr size_t kMaxConfigJsonBytes = size_t{16} << 20;  // config / generation_config
inline constexpr int kMaxHiddenSize = 1 << 16;                   // hidden_size (text and vision)
inline constexpr int kMaxIntermediateSize = 1 << 18;  // intermediate_size (text and vision)
inline constexpr int kMaxHiddenLayers = 1024;         // num_hidden_layers, vision depth
inline constexpr int kMaxAttentionHeads = 1024;       // num_attention_heads, num_key_value_heads
inline constexpr int kMaxHeadDim = 1024;              // head_dim
inline constexpr int kMaxVocabSize = 1 << 24;         // vocab_size (= the tokenizer's id bound)
// max_position_embeddings and deepstack_max_visual_positions: 16x the longest Qwen3-VL context.
inline constexpr int kMaxContextPositions = 1 << 22;
inline constexpr int64_t kMaxWeightElements = int64_t{1} << 34;   // one weight matrix
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 40;  // the language model's sum
inline constexpr int kMaxEosTokenIds = 64;  // entries of one eos_token_id list
// Mixture of experts (ADR 0027): num_experts and num_experts_per_tok (released: 128 and 8).
inline constexpr int kMaxExperts = 4096;
inline constexpr int kMaxExpertsPerToken = 64;

// Carried explicitly through every API; never guessed from a tensor's rank (docs/contracts.md §3).
enum class PositionMode : int { k1D = 0, kMrope = 1 };
const char* PositionModeName(PositionMode mode);  // "1d" / "mrope"

// Interleaved: Qwen3-VL (THW THW ... TTTT). Chunked: Qwen2-VL (contiguous T, H, W blocks).
enum class MropeLayout : int { kInterleaved = 0, kChunked = 1 };

// DeepStack target language layers and the static bound Nmax (docs/contracts.md §2).
struct DeepStackConfig {
  std::vector<int> target_layers;  // strictly increasing, each in [0, L)
  // Nmax; 0 when the config derives DeepStack from vision_config and leaves Nmax to the load
  // options (it then defaults to the context capacity).
  int max_visual_positions = 0;
  bool explicit_keys = false;  // declared with deepstack_language_layer_indices
};

// How a checkpoint stores a sparse layer's experts (ADR 0027).
enum class MoeLayout : int {
  // Qwen3-MoE: mlp.experts.{e}.{gate,up}_proj.weight [I_e, H], mlp.experts.{e}.down_proj.weight
  // [H, I_e] (Linear [out, in]; F32/BF16/F16, or FP8 with block scales as the dense layout).
  kPerExpert = 0,
  // Qwen3-VL-MoE: mlp.experts.gate_up_proj [E, H, 2·I_e] (gate columns, then up) and
  // mlp.experts.down_proj [E, I_e, H] (stored [in, out]: transposed when prepared).
  kFused = 1,
};
const char* MoeLayoutName(MoeLayout layout);  // "per_expert" / "fused"

// The sparse MLP of qwen3_moe / qwen3_vl_moe (ADR 0027). Layer l is sparse when l is not in
// mlp_only_layers and (l + 1) % sparse_step == 0 (transformers' Qwen3MoeDecoderLayer rule);
// the other layers keep the dense SwiGLU MLP of Qwen3Config::intermediate. A sparse layer:
//   logits[E] = router · m                  (m = post-attention RMSNorm of the row, f32)
//   p = softmax(logits) in f32 over all E; the k largest (ties: the lower expert id first);
//   w = p[chosen] / Σ p[chosen] when norm_topk_prob (always for qwen3_vl_moe), else p[chosen]
//   out = Σ_j w_j · Down_e(SiLU(Gate_e(m)) · Up_e(m)),  e = chosen[j]
struct MoeConfig {
  int experts = 0;                   // E: num_experts, in [1, kMaxExperts]
  int top_k = 0;                     // k: num_experts_per_tok, in [1, min(E, kMaxExpertsPerToken)]
  int expert_intermediate = 0;       // I_e: moe_intermediate_size
  int sparse_step = 1;               // decoder_sparse_step, >= 1
  std::vector<int> mlp_only_layers;  // strictly increasing, each in [0, L)
  bool norm_topk_prob = true;
  MoeLayout layout = MoeLayout::kPerExpert;  // kFused for qwen3_vl_moe
};

struct Qwen3Config {
  // "qwen3", "qwen3_vl", "qwen3_moe" or "qwen3_vl_moe"
  std::string model_type;
  std::string weight_prefix;  // "model.language_model." (qwen3_vl) or "model." (qwen3)
  int hidden = 0;             // H
  int layers = 0;             // L
  int heads = 0;              // nh
  int kv_heads = 0;           // nkv
  int head_dim = 0;           // D (read from config, never H/nh)
  int intermediate = 0;       // I
  int vocab = 0;              // V
  double rms_norm_eps = 1e-6;
  double rope_theta = 0;
  bool tied = false;
  PositionMode position_mode = PositionMode::k1D;
  MropeLayout mrope_layout = MropeLayout::kInterleaved;
  std::array<int, 3> mrope_section{0, 0, 0};  // sums to D/2 in M-RoPE mode
  int max_position_embeddings = 0;

  // Multimodal token ids (-1 when the config has none).
  int image_token_id = -1;
  int video_token_id = -1;
  int vision_start_token_id = -1;
  int vision_end_token_id = -1;
  int spatial_merge_size = 2;
  // Generation stops on any of these: generation_config.json's eos_token_id, then the ids of
  // config.json (top level, then text_config) it does not list. Not sorted.
  std::vector<int> eos_token_ids;
  int bos_token_id = -1;

  std::optional<DeepStackConfig> deepstack;
  // quantization_config (top level, or text_config's; both must agree when both are given):
  // set for an FP8 block-quantized checkpoint (model/quantization_config.h).
  std::optional<Fp8Quantization> fp8;
  // Set for qwen3_moe / qwen3_vl_moe.
  std::optional<MoeConfig> moe;

  // Whether layer l's MLP is the sparse one (MoeConfig's rule; false without `moe`).
  bool IsSparseLayer(int l) const;
  // Whether the model has a vision tower's token ids and M-RoPE (qwen3_vl, qwen3_vl_moe).
  bool IsVisionLanguage() const { return model_type == "qwen3_vl" || model_type == "qwen3_vl_moe"; }
};

// Parses config.json text (under ParseUntrustedJson's rules and the bounds above). `label` names
// the file in error messages. Special token ids (image, video, vision start/end, bos, eos) must
// lie in [0, vocab_size) and the multimodal ones must differ from each other and from bos/eos.
StatusOr<Qwen3Config> ParseQwen3Config(const std::string& json_text, const std::string& label);

// Reads `dir/config.json` and, if present, the eos ids of `dir/generation_config.json` (joined
// to config.json's: Qwen3Config::eos_token_ids). Every eos id must lie inside the vocabulary and
// differ from the multimodal token ids. Files over kMaxConfigJsonBytes are refused unread.
StatusOr<Qwen3Config> LoadQwen3Config(const std::string& dir);

// Joins the eos ids of generation_config.json text (`label` names it) to cfg->eos_token_ids:
// generation_config's first, then cfg's it does not list. Its other keys are not read.
Status MergeGenerationConfig(const std::string& json_text, const std::string& label,
                             Qwen3Config* cfg);

// The rule Nmax <= capacity, checked only once the capacity is chosen (docs/contracts.md §2).
Status ValidateDeepStackCapacity(const DeepStackConfig& ds, int capacity);

// Canonical one-line-per-field text, used for the artifact identity and `vlstack inspect`.
std::string CanonicalConfigText(const Qwen3Config& cfg);

}  // namespace vls

#endif  // VLSTACK_MODEL_QWEN3_CONFIG_H_
