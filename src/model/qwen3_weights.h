// Binds the Hugging Face tensor names of a Qwen3 / Qwen3-VL checkpoint (and their
// mixture-of-experts forms) to the decoder.
#ifndef VLSTACK_MODEL_QWEN3_WEIGHTS_H_
#define VLSTACK_MODEL_QWEN3_WEIGHTS_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"
#include "model/fp8_weights.h"
#include "model/qwen3_config.h"

namespace vls {

// The Linear weights are as stored: float, or FP8 with block scales (model/fp8_weights.h), which
// only PreparedWeights reads (it dequantizes them); embeddings and norms are never FP8.
struct Qwen3LayerWeights {
  WeightMatrix q, k, v, o;      // [nh·D, H], [nkv·D, H], [nkv·D, H], [H, nh·D]
  WeightMatrix gate, up, down;  // [I, H], [I, H], [H, I]; empty (null data) in a sparse layer
  // A sparse layer (Qwen3Config::IsSparseLayer; empty otherwise):
  WeightMatrix router;  // [E, H]: mlp.gate.weight (never FP8)
  // MoeLayout::kPerExpert: E entries each, as Linear weights [out, in] (FP8 allowed).
  std::vector<WeightMatrix> expert_gate, expert_up;  // E × [I_e, H]
  std::vector<WeightMatrix> expert_down;             // E × [H, I_e]
  // MoeLayout::kFused: the stored 3-D tensors viewed as 2-D (never FP8). Expert e's rows of
  // fused_gate_up are [e·H, (e+1)·H), a [H, 2·I_e] block whose transpose is that expert's
  // gate rows then up rows; its rows of fused_down are [e·I_e, (e+1)·I_e), a [I_e, H] block
  // whose transpose is its down projection [H, I_e].
  kernels::Matrix fused_gate_up;  // [E·H, 2·I_e]
  kernels::Matrix fused_down;     // [E·I_e, H]
  std::vector<float> input_norm;  // [H]
  std::vector<float> post_norm;   // [H]
  std::vector<float> q_norm;      // [D]
  std::vector<float> k_norm;      // [D]
};

struct Qwen3Weights {
  kernels::Matrix embed;  // [V, H]
  // The checkpoint file `embed` points into (null for an in-memory checkpoint): embedding rows
  // are read from it with pread, so looked-up rows do not stay mapped (Qwen3Model::Embed).
  const MappedFile* embed_file = nullptr;
  WeightMatrix lm_head;           // [V, H]; the embedding matrix when tied
  std::vector<float> final_norm;  // [H]
  std::vector<Qwen3LayerWeights> layers;
  // Name, dtype, shape of every bound tensor in a fixed order (for the artifact identity).
  std::vector<std::string> bound_names;
};

// Binds and checks every tensor against the config: dtype (F32/BF16/F16; F8_E4M3 for the
// Linear weights q/k/v/o/gate/up/down_proj and lm_head under the rules of
// model/fp8_weights.h, their `.weight_scale_inv` tensors bound with them), exact shape,
// missing tensors and unexpected tensors are all reported by name (up to the first 20 each).
// A sparse layer (Qwen3Config::IsSparseLayer; ADR 0027) binds mlp.gate.weight [E, H] and its
// experts in cfg.moe->layout instead of the dense MLP: per expert,
// mlp.experts.{e}.{gate,up,down}_proj.weight (Linear weights, FP8 allowed); fused,
// mlp.experts.gate_up_proj [E, H, 2·I_e] and mlp.experts.down_proj [E, I_e, H] (never FP8). A
// checkpoint in the other layout is named as such. bound_names lists every expert tensor.
// `model.visual.*` tensors of a qwen3_vl / qwen3_vl_moe checkpoint belong to the vision tower
// and are allowed.
// Matrices are views into the checkpoint: it must outlive the returned weights.
StatusOr<Qwen3Weights> BindQwen3Weights(const Qwen3Config& cfg, const SafetensorsCheckpoint& ckpt);

}  // namespace vls

#endif  // VLSTACK_MODEL_QWEN3_WEIGHTS_H_
