// Tiny random checkpoints in the real Hugging Face layout, for tests, demos and benchmarks.
#ifndef VLSTACK_MODEL_TEST_CHECKPOINT_H_
#define VLSTACK_MODEL_TEST_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace vls {

// What `vlstack make-test-model` writes. Defaults: a tiny Qwen3-VL (M-RoPE, DeepStack 3).
struct TestModelSpec {
  // "qwen3-vl" (qwen3_vl), "qwen3" (qwen3), and their mixture-of-experts forms "qwen3-vl-moe"
  // (qwen3_vl_moe: experts in the fused layout) and "qwen3-moe" (qwen3_moe: per expert).
  std::string arch = "qwen3-vl";
  int hidden = 64, layers = 3, heads = 4, kv_heads = 2, head_dim = 16, intermediate = 128;
  int vocab = 512;
  DType dtype = DType::kBF16;
  bool tied = true;
  std::vector<int> mrope_section;  // empty: derived from head_dim
  bool chunked = false;
  double rope_theta = 0;       // 0: 5e6 (qwen3-vl) / 1e6 (qwen3)
  int deepstack = 3;           // vision deepstack_visual_indexes count
  std::vector<int> ds_layers;  // explicit deepstack_language_layer_indices
  int ds_nmax = 0;
  int shards = 0;  // 0: automatic (2 GiB per shard)
  bool vision = true;
  // The vision tower (qwen3-vl with `vision`): config.json's vision_config, model.visual.*
  // and preprocessor_config.json.
  int vision_depth = 0;  // 0: max(2, deepstack + 1)
  int vision_hidden = 32, vision_heads = 2, vision_intermediate = 64;
  int vision_pos_grid = 4;             // num_position_embeddings = side²
  std::vector<int> vision_ds_indexes;  // deepstack_visual_indexes; empty: 0..deepstack-1
  // preprocessor_config.json size.shortest_edge / longest_edge (min / max pixels): a tiny
  // model keeps images small (4 to 64 tokens); the named 2B shape ships the real values.
  int64_t min_pixels = 4096, max_pixels = 65536;
  uint64_t seed = 0;
  double init_scale = 1.0;
  // An FP8 checkpoint as Qwen's FP8 releases store one (model/fp8_weights.h): the text
  // decoder's Linear weights (q/k/v/o/gate/up/down_proj) quantized to F8_E4M3 with a BF16
  // `weight_scale_inv` per [fp8_block_rows, fp8_block_cols] block, computed like the reference
  // quantizers (scale = amax / 448 rounded to BF16, code = e4m3(clamp(w / scale, ±448)); an
  // all-zero block gets scale 1 and zero codes, as transformers' Fp8Quantize does), config.json
  // declaring quantization_config; embeddings, norms and biases stay in `dtype`. lm_head (with
  // fp8_lm_head) and the vision tower's Linear weights (blocks and mergers, with fp8_vision;
  // the patch embedding is a convolution and stays) are quantized only when asked, and
  // modules_to_not_convert lists "lm_head" and "model.visual" otherwise.
  bool fp8 = false;
  int fp8_block_rows = 128, fp8_block_cols = 128;
  bool fp8_lm_head = false;
  bool fp8_vision = false;
  // Mixture of experts (qwen3-moe / qwen3-vl-moe; ADR 0027): num_experts, num_experts_per_tok,
  // moe_intermediate_size, decoder_sparse_step, mlp_only_layers (dense layers) and, for
  // qwen3-moe, norm_topk_prob (qwen3-vl-moe always renormalises and writes true). A sparse
  // layer's router is N(0, 1/H), so its logits on a normed row are O(1) and rows choose
  // different experts; experts are initialised like the dense MLP. With `fp8` (qwen3-moe only)
  // every expert's gate/up/down_proj is quantized like the dense Linears; the router is not.
  int experts = 8, top_k = 2, moe_intermediate = 48, sparse_step = 1;
  std::vector<int> mlp_only_layers;
  bool norm_topk_prob = true;
  // A scripted model (untied only): for each (token, next) pair, greedy decoding after `token`
  // gives `next`, whatever came before. The layers' output projections (o_proj, down_proj) are
  // zero, so each position's final hidden state is its own embedding; the pairs' tokens get
  // orthonormal embeddings and each `next` row of the LM head points at its token's. Every
  // token appears at most once as the first of a pair; at most `hidden` distinct first tokens.
  // Tests use it to make a model write a known reply (a tool call, a stop string).
  std::vector<std::pair<int32_t, int32_t>> successors;
};

// Whether `arch` is a 1-D text model ("qwen3", "qwen3-moe") / has experts ("*-moe").
bool TestArchIsText(const std::string& arch);
bool TestArchIsMoe(const std::string& arch);
// Whether layer l of `spec` is sparse (Qwen3Config::IsSparseLayer's rule on the spec).
bool TestLayerIsSparse(const TestModelSpec& spec, int l);

// A named shape: "tiny", "qwen3-vl-2b" (the released 2B with its vision tower),
// "qwen3-vl-2b-text", "qwen3-0.6b" (docs/contracts.md §6), "qwen3-vl-30b-a3b" (the released
// Qwen3-VL-30B-A3B with its vision tower) or "qwen3-30b-a3b" (the released Qwen3-30B-A3B).
StatusOr<TestModelSpec> NamedTestShape(const std::string& name);

// Writes config.json, generation_config.json (and preprocessor_config.json with a vision
// tower) and model.safetensors (or shards plus
// model.safetensors.index.json) into `dir`, creating it. Weights are random normal with
// fixed-seed splitmix64, so the same spec always gives the same bytes. Progress goes to
// stderr when `verbose`.
Status WriteTestCheckpoint(const std::string& dir, const TestModelSpec& spec, bool verbose);

// Overwrites element `index` (row-major) of tensor `name` in the checkpoint written to `dir`
// with `value` in the tensor's dtype (F32, BF16 or F16), for corrupt-weight tests (a NaN
// weight). NotFound for an unknown tensor, OutOfRange for an index past its end.
Status SetTestCheckpointElement(const std::string& dir, const std::string& name, int64_t index,
                                float value);

}  // namespace vls

#endif  // VLSTACK_MODEL_TEST_CHECKPOINT_H_
