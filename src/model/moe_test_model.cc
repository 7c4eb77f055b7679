#include "model/moe_test_model.h"

#include <cmath>
#include <filesystem>
#include <random>

#include "io/safetensors.h"
#include "kernels/moe.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace vls::test {

namespace {

// Normal values of standard deviation `scale`, rounded to `dtype` (so that the logical f32
// weights are exactly what the checkpoint holds).
std::vector<float> Draw(std::mt19937_64& rng, int64_t n, double scale, DType dtype,
                        double mean = 0.0) {
  std::normal_distribution<double> d(mean, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) {
    f = static_cast<float>(d(rng));
    if (dtype == DType::kBF16) f = Bf16ToF32(F32ToBf16(f));
  }
  return v;
}

// A tensor of `dtype` holding `values` (exact: they are already rounded to it).
HostTensor Tensor(DType dtype, Shape shape, const std::vector<float>& values) {
  if (dtype == DType::kF32) return HostTensor::FromF32(std::move(shape), values);
  HostTensor t(DType::kBF16, std::move(shape));
  auto* out = reinterpret_cast<uint16_t*>(t.data());
  for (size_t i = 0; i < values.size(); ++i) out[i] = F32ToBf16(values[i]);
  return t;
}

std::string ConfigJson(const MoeTestSpec& s) {
  return "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":" +
         std::to_string(s.hidden) + ",\"intermediate_size\":" + std::to_string(s.intermediate) +
         ",\"num_hidden_layers\":" + std::to_string(s.layers) +
         ",\"num_attention_heads\":" + std::to_string(s.heads) +
         ",\"num_key_value_heads\":" + std::to_string(s.kv_heads) +
         ",\"head_dim\":" + std::to_string(s.head_dim) +
         ",\"vocab_size\":" + std::to_string(s.vocab) +
         ",\"hidden_act\":\"silu\",\"rms_norm_eps\":1e-6,\"max_position_embeddings\":4096,"
         "\"tie_word_embeddings\":false,\"rope_theta\":1000000.0,\"bos_token_id\":1,"
         "\"eos_token_id\":2}";
}

}  // namespace

MoeTestModel::MoeTestModel(const MoeTestSpec& spec) : spec_(spec) {
  std::mt19937_64 rng(spec.seed);
  const int64_t H = spec.hidden, V = spec.vocab, I = spec.intermediate, E = spec.experts,
                Ie = spec.expert_intermediate, D = spec.head_dim;
  const int64_t qd = spec.heads * D, kvd = spec.kv_heads * D;
  const double sh = 1.0 / std::sqrt(static_cast<double>(H));
  const DType dt = spec.dtype;
  embed_ = Draw(rng, V * H, 1.0, dt);
  final_norm_ = Draw(rng, H, 0.1, dt, 1.0);
  lm_head_ = Draw(rng, V * H, sh, dt);
  for (int l = 0; l < spec.layers; ++l) {
    Attn a;
    a.q = Draw(rng, qd * H, sh, dt);
    a.k = Draw(rng, kvd * H, sh, dt);
    a.v = Draw(rng, kvd * H, sh, dt);
    a.o = Draw(rng, H * qd, spec.zero_attention ? 0.0 : 1.0 / std::sqrt(double(qd)), dt);
    a.q_norm = Draw(rng, D, 0.1, dt, 1.0);
    a.k_norm = Draw(rng, D, 0.1, dt, 1.0);
    a.input_norm = Draw(rng, H, 0.1, dt, 1.0);
    attn_.push_back(std::move(a));
    MoeTestLayer L;
    L.post_norm = Draw(rng, H, 0.1, dt, 1.0);
    L.gate = Draw(rng, I * H, sh, dt);
    L.up = Draw(rng, I * H, sh, dt);
    L.down = Draw(rng, H * I, 1.0 / std::sqrt(double(I)), dt);
    // Router logits of a few units: routing far from uniform, ties unlikely.
    L.router = Draw(rng, E * H, 2.0 * sh, dt);
    for (int64_t e = 0; e < E; ++e) {
      L.egate.push_back(Draw(rng, Ie * H, sh, dt));
      L.eup.push_back(Draw(rng, Ie * H, sh, dt));
      L.edown.push_back(Draw(rng, H * Ie, 1.0 / std::sqrt(double(Ie)), dt));
    }
    layers_.push_back(std::move(L));
  }
}

Qwen3Config MoeTestModel::Config(MoeLayout layout) const {
  Qwen3Config cfg = ParseQwen3Config(ConfigJson(spec_), "moe test config").value();
  cfg.model_type = "qwen3_moe";
  MoeConfig moe;
  moe.experts = spec_.experts;
  moe.top_k = spec_.top_k;
  moe.expert_intermediate = spec_.expert_intermediate;
  moe.sparse_step = spec_.sparse_step;
  moe.mlp_only_layers = spec_.mlp_only_layers;
  moe.norm_topk_prob = spec_.norm_topk_prob;
  moe.layout = layout;
  cfg.moe = moe;
  return cfg;
}

StatusOr<std::unique_ptr<Qwen3Model>> MoeTestModel::Load(const std::string& dir, MoeLayout layout,
                                                         const ModelOptions& options) const {
  const Qwen3Config cfg = Config(layout);
  const int64_t H = spec_.hidden, V = spec_.vocab, I = spec_.intermediate, E = spec_.experts,
                Ie = spec_.expert_intermediate, D = spec_.head_dim;
  const int64_t qd = spec_.heads * D, kvd = spec_.kv_heads * D;
  const DType dt = spec_.dtype;
  std::vector<HostTensor> keep;
  std::vector<NamedTensor> named;
  keep.reserve(static_cast<size_t>(16 + spec_.layers * (16 + 3 * E)));
  auto add = [&](const std::string& name, Shape shape, const std::vector<float>& v, DType type) {
    keep.push_back(Tensor(type, std::move(shape), v));
    named.push_back({name, keep.back().view()});
  };
  add("model.embed_tokens.weight", {V, H}, embed_, dt);
  add("model.norm.weight", {H}, final_norm_, DType::kF32);
  add("lm_head.weight", {V, H}, lm_head_, dt);
  for (int l = 0; l < spec_.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Attn& a = attn_[static_cast<size_t>(l)];
    const MoeTestLayer& L = layers_[static_cast<size_t>(l)];
    add(p + "self_attn.q_proj.weight", {qd, H}, a.q, dt);
    add(p + "self_attn.k_proj.weight", {kvd, H}, a.k, dt);
    add(p + "self_attn.v_proj.weight", {kvd, H}, a.v, dt);
    add(p + "self_attn.o_proj.weight", {H, qd}, a.o, dt);
    if (!cfg.IsSparseLayer(l)) {
      add(p + "mlp.gate_proj.weight", {I, H}, L.gate, dt);
      add(p + "mlp.up_proj.weight", {I, H}, L.up, dt);
      add(p + "mlp.down_proj.weight", {H, I}, L.down, dt);
    } else {
      add(p + "mlp.gate.weight", {E, H}, L.router, dt);
      if (layout == MoeLayout::kPerExpert) {
        for (int64_t e = 0; e < E; ++e) {
          const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
          const auto i = static_cast<size_t>(e);
          add(q + "gate_proj.weight", {Ie, H}, L.egate[i], dt);
          add(q + "up_proj.weight", {Ie, H}, L.eup[i], dt);
          add(q + "down_proj.weight", {H, Ie}, L.edown[i], dt);
        }
      } else {
        // gate_up_proj [E, H, 2·I_e]: [e][h][c] = gate[e][c][h] (c < I_e), up[e][c - I_e][h];
        // down_proj [E, I_e, H]: [e][i][h] = down[e][h][i].
        std::vector<float> gu(static_cast<size_t>(E * H * 2 * Ie)),
            dn(static_cast<size_t>(E * Ie * H));
        for (int64_t e = 0; e < E; ++e) {
          const auto i = static_cast<size_t>(e);
          for (int64_t h = 0; h < H; ++h) {
            for (int64_t c = 0; c < 2 * Ie; ++c) {
              gu[static_cast<size_t>((e * H + h) * 2 * Ie + c)] =
                  c < Ie ? L.egate[i][static_cast<size_t>(c * H + h)]
                         : L.eup[i][static_cast<size_t>((c - Ie) * H + h)];
            }
          }
          for (int64_t r = 0; r < Ie; ++r) {
            for (int64_t h = 0; h < H; ++h) {
              dn[static_cast<size_t>((e * Ie + r) * H + h)] =
                  L.edown[i][static_cast<size_t>(h * Ie + r)];
            }
          }
        }
        add(p + "mlp.experts.gate_up_proj", {E, H, 2 * Ie}, gu, dt);
        add(p + "mlp.experts.down_proj", {E, Ie, H}, dn, dt);
      }
    }
    add(p + "input_layernorm.weight", {H}, a.input_norm, DType::kF32);
    add(p + "post_attention_layernorm.weight", {H}, L.post_norm, DType::kF32);
    add(p + "self_attn.q_norm.weight", {D}, a.q_norm, DType::kF32);
    add(p + "self_attn.k_norm.weight", {D}, a.k_norm, DType::kF32);
  }
  std::filesystem::create_directories(dir);
  VLS_RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", named));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> ckpt,
                       SafetensorsCheckpoint::Open(dir));
  // Bound by hand: the views point into the mapped file.
  const SafetensorsCheckpoint& c = *ckpt;
  auto mat = [&c](const std::string& name, int64_t rows, int64_t cols) {
    const TensorView& v = c.Find(name)->view;
    return kernels::Matrix{v.dtype, v.data, rows, cols};
  };
  auto lin = [&](const std::string& name, int64_t rows, int64_t cols) {
    return WeightMatrix{mat(name, rows, cols), {}};
  };
  auto vec = [&c](const std::string& name) { return ToF32Vector(c.Find(name)->view); };
  Qwen3Weights w;
  w.embed = mat("model.embed_tokens.weight", V, H);
  w.lm_head = lin("lm_head.weight", V, H);
  w.final_norm = vec("model.norm.weight");
  for (int l = 0; l < spec_.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Qwen3LayerWeights L;
    L.q = lin(p + "self_attn.q_proj.weight", qd, H);
    L.k = lin(p + "self_attn.k_proj.weight", kvd, H);
    L.v = lin(p + "self_attn.v_proj.weight", kvd, H);
    L.o = lin(p + "self_attn.o_proj.weight", H, qd);
    if (!cfg.IsSparseLayer(l)) {
      L.gate = lin(p + "mlp.gate_proj.weight", I, H);
      L.up = lin(p + "mlp.up_proj.weight", I, H);
      L.down = lin(p + "mlp.down_proj.weight", H, I);
    } else {
      L.router = lin(p + "mlp.gate.weight", E, H);
      if (layout == MoeLayout::kPerExpert) {
        for (int64_t e = 0; e < E; ++e) {
          const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
          L.expert_gate.push_back(lin(q + "gate_proj.weight", Ie, H));
          L.expert_up.push_back(lin(q + "up_proj.weight", Ie, H));
          L.expert_down.push_back(lin(q + "down_proj.weight", H, Ie));
        }
      } else {
        L.fused_gate_up = mat(p + "mlp.experts.gate_up_proj", E * H, 2 * Ie);
        L.fused_down = mat(p + "mlp.experts.down_proj", E * Ie, H);
      }
    }
    L.input_norm = vec(p + "input_layernorm.weight");
    L.post_norm = vec(p + "post_attention_layernorm.weight");
    L.q_norm = vec(p + "self_attn.q_norm.weight");
    L.k_norm = vec(p + "self_attn.k_norm.weight");
    w.layers.push_back(std::move(L));
  }
  return Qwen3Model::FromWeights(cfg, std::move(ckpt), std::move(w), options);
}

void MoeTestModel::ReferenceNorm(const float* x, const std::vector<float>& weight,
                                 float* out) const {
  const int64_t H = spec_.hidden;
  double ss = 0;
  for (int64_t h = 0; h < H; ++h) ss += double(x[h]) * x[h];
  const double r = 1.0 / std::sqrt(ss / double(H) + 1e-6);
  for (int64_t h = 0; h < H; ++h) {
    out[h] = static_cast<float>(double(x[h]) * r * weight[static_cast<size_t>(h)]);
  }
}

void MoeTestModel::ReferenceMlp(int l, const float* m, float* out, int32_t* experts,
                                float* weights) const {
  const int64_t H = spec_.hidden, E = spec_.experts, k = spec_.top_k;
  const MoeTestLayer& L = layer(l);
  // One SwiGLU over weights gate/up [n, H], down [H, n], added to acc with factor w.
  auto swiglu = [&](const std::vector<float>& gate, const std::vector<float>& up,
                    const std::vector<float>& down, int64_t n, double w, std::vector<double>& acc) {
    std::vector<double> act(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double g = 0, u = 0;
      for (int64_t h = 0; h < H; ++h) {
        g += double(gate[static_cast<size_t>(i * H + h)]) * m[h];
        u += double(up[static_cast<size_t>(i * H + h)]) * m[h];
      }
      act[static_cast<size_t>(i)] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t h = 0; h < H; ++h) {
      double d = 0;
      for (int64_t i = 0; i < n; ++i)
        d += double(down[static_cast<size_t>(h * n + i)]) * act[static_cast<size_t>(i)];
      acc[static_cast<size_t>(h)] += w * d;
    }
  };
  std::vector<double> acc(static_cast<size_t>(H), 0.0);
  if (!Config(MoeLayout::kPerExpert).IsSparseLayer(l)) {
    swiglu(L.gate, L.up, L.down, spec_.intermediate, 1.0, acc);
  } else {
    std::vector<float> logits(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      double s = 0;
      for (int64_t h = 0; h < H; ++h) s += double(L.router[static_cast<size_t>(e * H + h)]) * m[h];
      logits[static_cast<size_t>(e)] = static_cast<float>(s);
    }
    std::vector<int32_t> ex(static_cast<size_t>(k));
    std::vector<float> w(static_cast<size_t>(k));
    kernels::RouteTopK(logits.data(), 1, E, static_cast<int>(k), spec_.norm_topk_prob, ex.data(),
                       w.data());
    for (int64_t j = 0; j < k; ++j) {
      const auto e = static_cast<size_t>(ex[static_cast<size_t>(j)]);
      swiglu(L.egate[e], L.eup[e], L.edown[e], spec_.expert_intermediate, w[static_cast<size_t>(j)],
             acc);
      if (experts != nullptr) experts[j] = ex[static_cast<size_t>(j)];
      if (weights != nullptr) weights[j] = w[static_cast<size_t>(j)];
    }
  }
  for (int64_t h = 0; h < H; ++h) out[h] = static_cast<float>(acc[static_cast<size_t>(h)]);
}

}  // namespace vls::test
