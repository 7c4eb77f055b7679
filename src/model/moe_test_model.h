// Test helper (tests only): a tiny mixture-of-experts Qwen3 text model written to a folder in
// either expert layout from the same logical weights, bound by hand (independent of the
// checkpoint binder), with a plain float64 reference of its sparse MLP.
#ifndef VLSTACK_MODEL_MOE_TEST_MODEL_H_
#define VLSTACK_MODEL_MOE_TEST_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/qwen3_config.h"
#include "model/qwen3_model.h"

namespace vls::test {

struct MoeTestSpec {
  int hidden = 64, layers = 3, heads = 4, kv_heads = 2, head_dim = 16, intermediate = 96;
  int vocab = 97;
  int experts = 8, top_k = 3, expert_intermediate = 32;
  int sparse_step = 1;
  std::vector<int> mlp_only_layers = {1};  // layers 0 and 2 sparse, 1 dense
  bool norm_topk_prob = true;
  DType dtype = DType::kF32;  // the checkpoint's dtype (values rounded to it when BF16)
  // Zero o_proj: attention adds nothing, so the model is x += Mlp(RmsNorm(x)) per layer and
  // the reference below covers the whole forward.
  bool zero_attention = false;
  uint64_t seed = 7;
};

// One layer's logical weights in f32 (already rounded to the checkpoint's dtype).
struct MoeTestLayer {
  std::vector<float> post_norm;                // [H]
  std::vector<float> gate, up, down;           // dense: [I, H], [I, H], [H, I]
  std::vector<float> router;                   // [E, H]
  std::vector<std::vector<float>> egate, eup;  // E × [I_e, H]
  std::vector<std::vector<float>> edown;       // E × [H, I_e]
};

class MoeTestModel {
 public:
  // Draws the weights of `spec` (deterministic in spec.seed).
  explicit MoeTestModel(const MoeTestSpec& spec);

  // The config (model_type "qwen3_moe", `moe` set with `layout`).
  Qwen3Config Config(MoeLayout layout) const;
  // Writes the checkpoint in `layout` under `dir` (created) and loads it with `options`.
  StatusOr<std::unique_ptr<Qwen3Model>> Load(const std::string& dir, MoeLayout layout,
                                             const ModelOptions& options) const;

  const MoeTestSpec& spec() const { return spec_; }
  const std::vector<float>& embed() const { return embed_; }  // [V, H]
  const std::vector<float>& final_norm() const { return final_norm_; }
  const std::vector<float>& lm_head() const { return lm_head_; }  // [V, H]
  const MoeTestLayer& layer(int l) const { return layers_[static_cast<size_t>(l)]; }

  // out[H] = the MLP of layer l (sparse or dense) on m[H] (the normed row), in float64 but
  // routed with kernels::RouteTopK on the f32-rounded logits; experts/weights: the routing
  // (sparse layers only; may be null).
  void ReferenceMlp(int l, const float* m, float* out, int32_t* experts = nullptr,
                    float* weights = nullptr) const;
  // RmsNorm(x[H]) · weight in float64, rounded to f32.
  void ReferenceNorm(const float* x, const std::vector<float>& weight, float* out) const;

 private:
  MoeTestSpec spec_;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<MoeTestLayer> layers_;
  // Attention weights (not part of the reference): per layer q, k, v, o, q/k/input norms.
  struct Attn {
    std::vector<float> q, k, v, o, q_norm, k_norm, input_norm;
  };
  std::vector<Attn> attn_;
};

}  // namespace vls::test

#endif  // VLSTACK_MODEL_MOE_TEST_MODEL_H_
