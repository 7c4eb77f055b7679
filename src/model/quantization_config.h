// config.json's `quantization_config`: the FP8 block-quantized checkpoints Qwen publishes
// (Qwen/Qwen3-0.6B-FP8, Qwen/Qwen3-VL-2B-Instruct-FP8, ...) declare
//
//   "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//                           "weight_block_size": [128, 128], "modules_to_not_convert": [...]}
//
// (Hugging Face's FineGrainedFP8Config). What the tensors of such a checkpoint must look like is
// model/fp8_weights.h; the decision record is docs/adr/0017-fp8-checkpoints.md.
//
// Rules (every error names the file and the key; read with io/untrusted_json.h's strict readers):
//   * quantization_config is an object (null or absent: no quantization).
//   * quant_method is a string; "fp8" is the only method implemented. Any other (awq, gptq,
//     bitsandbytes, compressed-tensors, mxfp4, ...) is kUnimplemented naming it.
//   * fmt, when given, is "e4m3" (absent means e4m3); another (e5m2, ...) is kUnimplemented.
//   * activation_scheme, when given, is "dynamic" (vlstack computes in f32/bf16/int8 and never
//     uses FP8 activations, so a dynamic scheme needs nothing); "static" (per-tensor activation
//     scales stored in the checkpoint) and anything else are kUnimplemented naming it.
//   * weight_block_size is required: two integers [rows, cols] in [1, kMaxFp8BlockSize]. Absent
//     or null (per-tensor FP8, another scale layout) is kUnimplemented.
//   * modules_to_not_convert and ignored_layers (vLLM's spelling), when given and not null, are
//     lists of at most kMaxFp8ExcludedModules non-empty strings of at most
//     kMaxFp8ModuleNameBytes bytes (an empty one would exclude every module).
//   * Other keys are ignored, as everywhere in config.json.
#ifndef VLSTACK_MODEL_QUANTIZATION_CONFIG_H_
#define VLSTACK_MODEL_QUANTIZATION_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vls {

inline constexpr int64_t kMaxFp8BlockSize = int64_t{1} << 20;
inline constexpr size_t kMaxFp8ExcludedModules = 4096;
inline constexpr size_t kMaxFp8ModuleNameBytes = 1024;

// FP8 E4M3 weights with one scale per [block_rows, block_cols] block of each quantized Linear
// weight (model/fp8_weights.h).
struct Fp8Quantization {
  int64_t block_rows = 128;  // weight_block_size[0]: output rows (of [out, in]) per scale
  int64_t block_cols = 128;  // weight_block_size[1]: input columns per scale
  // modules_to_not_convert, then ignored_layers, in file order.
  std::vector<std::string> excluded_modules;
};

// Parses the value of a quantization_config key; `where` names it in errors
// ("config.json: quantization_config"). nullopt for null.
StatusOr<std::optional<Fp8Quantization>> ParseQuantizationConfig(const nlohmann::json& v,
                                                                 const std::string& where);

// Whether the config keeps the Linear weight `weight_name` ("model.layers.3.mlp.down_proj.weight")
// out of FP8, by Hugging Face's rule (transformers integrations/finegrained_fp8.py,
// _replace_with_fp8_linear, which tests parameter names): an entry excludes the weight when it
// is a substring of the name with every run of digits replaced by '*' ("model.layers.*.mlp"),
// or (so that entries naming one layer, and vLLM's prefixes, also work) of the name itself.
// `matched`, when not null, receives the entry.
bool Fp8ModuleExcluded(const Fp8Quantization& q, std::string_view weight_name,
                       std::string* matched);

// One line for the artifact identity and `vlstack inspect`:
// "quantization=fp8 e4m3 block 128x128 activation dynamic excluded lm_head,model.visual\n".
std::string CanonicalQuantizationText(const Fp8Quantization& q);

}  // namespace vls

#endif  // VLSTACK_MODEL_QUANTIZATION_CONFIG_H_
