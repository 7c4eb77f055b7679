#include "model/qwen3_weights.h"

#include <cstring>
#include <set>

namespace vls {
namespace {

class Binder {
 public:
  Binder(const SafetensorsCheckpoint& ckpt, const std::optional<Fp8Quantization>& fp8)
      : ckpt_(ckpt), fp8_(fp8) {}

  // Looks up `name`, checks its dtype and shape; records problems instead of failing fast so
  // that one load reports every missing or malformed tensor. `linear`: a Linear weight, which
  // may be F8_E4M3.
  const SafetensorsCheckpoint::Tensor* Take(const std::string& name, const Shape& shape,
                                            bool linear = false) {
    used_.insert(name);
    const SafetensorsCheckpoint::Tensor* t = ckpt_.Find(name);
    if (t == nullptr) {
      missing_.push_back(name);
      return nullptr;
    }
    const DType dt = t->view.dtype;
    if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16 &&
        !(linear && dt == DType::kF8E4M3)) {
      problems_.push_back("tensor '" + name + "' has dtype " + std::string(DTypeName(dt)) +
                          (dt == DType::kF8E4M3
                               ? "; only Linear weights (q/k/v/o/gate/up/down_proj, lm_head) "
                                 "may be FP8"
                               : "; weights must be F32, BF16 or F16"));
      return nullptr;
    }
    if (t->view.shape != shape) {
      problems_.push_back("tensor '" + name + "' has shape " + ShapeToString(t->view.shape) +
                          " but the config requires " + ShapeToString(shape));
      return nullptr;
    }
    bound_.push_back(name);
    return t;
  }

  kernels::Matrix TakeMatrix(const std::string& name, int64_t rows, int64_t cols) {
    const auto* t = Take(name, {rows, cols});
    if (!t) return {};
    return {t->view.dtype, t->view.data, rows, cols};
  }

  // A Linear weight and, when it is FP8, its block scales (model/fp8_weights.h).
  WeightMatrix TakeLinear(const std::string& name, int64_t rows, int64_t cols) {
    const std::string scale_name = Fp8ScaleName(name);
    const SafetensorsCheckpoint::Tensor* scale = ckpt_.Find(scale_name);
    if (scale != nullptr) used_.insert(scale_name);
    const auto* t = Take(name, {rows, cols}, /*linear=*/true);
    if (!t) return {};
    StatusOr<Fp8BlockScales> fp8 =
        BindFp8Scales(fp8_, name, t->view, scale != nullptr ? &scale->view : nullptr);
    if (!fp8.ok()) {
      problems_.push_back(fp8.status().message());
      return {};
    }
    if (fp8->fp8()) bound_.push_back(scale_name);
    return {{t->view.dtype, t->view.data, rows, cols}, *fp8};
  }

  // A stored tensor of any rank, viewed as the 2-D matrix [rows, cols] (the fused expert
  // tensors; never FP8).
  kernels::Matrix TakeAs2D(const std::string& name, const Shape& shape, int64_t rows,
                           int64_t cols) {
    const auto* t = Take(name, shape);
    if (!t) return {};
    return {t->view.dtype, t->view.data, rows, cols};
  }

  // A problem that is not one tensor's (a layout mismatch), listed with the bad tensors.
  void Problem(std::string what) { problems_.push_back(std::move(what)); }

  std::vector<float> TakeVector(const std::string& name, int64_t n) {
    const auto* t = Take(name, {n});
    if (!t) return std::vector<float>(static_cast<size_t>(n), 0.0f);
    return ToF32Vector(t->view);
  }

  Status Finish(const std::string& prefix_allowed_extra) {
    std::vector<std::string> unexpected;
    for (const std::string& n : ckpt_.Names()) {
      if (used_.count(n)) continue;
      if (!prefix_allowed_extra.empty() && n.rfind(prefix_allowed_extra, 0) == 0) continue;
      unexpected.push_back(n);
    }
    if (missing_.empty() && unexpected.empty() && problems_.empty()) return Status::Ok();
    std::string msg = "checkpoint does not match the config:";
    auto list = [&msg](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      msg += std::string(" ") + what + " (" + std::to_string(names.size()) + "):";
      for (size_t i = 0; i < names.size() && i < 20; ++i) msg += " " + names[i];
      if (names.size() > 20) msg += " ...";
      msg += ";";
    };
    list("missing tensors", missing_);
    list("unexpected tensors", unexpected);
    list("bad tensors", problems_);
    return InvalidArgument(msg);
  }

  std::vector<std::string> bound() const { return bound_; }

 private:
  const SafetensorsCheckpoint& ckpt_;
  const std::optional<Fp8Quantization>& fp8_;
  std::set<std::string> used_;
  std::vector<std::string> missing_, problems_, bound_;
};

bool SameBytes(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.nbytes == b.nbytes &&
         (a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0);
}

// A sparse layer's router and experts (ADR 0027), under `mp` ("model.layers.3.mlp.").
void BindExperts(const Qwen3Config& cfg, const SafetensorsCheckpoint& ckpt, const std::string& mp,
                 Binder* b, Qwen3LayerWeights* L) {
  const MoeConfig& m = *cfg.moe;
  const int64_t E = m.experts, H = cfg.hidden, Ie = m.expert_intermediate;
  L->router = {b->TakeMatrix(mp + "gate.weight", E, H), {}};  // [E, H], never FP8
  const std::string xp = mp + "experts.";
  if (m.layout == MoeLayout::kFused) {
    // [E, H, 2·I_e] viewed as [E·H, 2·I_e]; [E, I_e, H] as [E·I_e, H].
    L->fused_gate_up = b->TakeAs2D(xp + "gate_up_proj", {E, H, 2 * Ie}, E * H, 2 * Ie);
    L->fused_down = b->TakeAs2D(xp + "down_proj", {E, Ie, H}, E * Ie, H);
    if (L->fused_gate_up.data == nullptr && ckpt.Find(xp + "0.gate_proj.weight") != nullptr) {
      b->Problem(xp + "*: the checkpoint stores this layer's experts one by one (" + xp +
                 "{e}.gate_proj.weight), but model_type " + cfg.model_type +
                 " stores them fused (" + xp + "gate_up_proj)");
    }
    return;
  }
  L->expert_gate.resize(static_cast<size_t>(E));
  L->expert_up.resize(static_cast<size_t>(E));
  L->expert_down.resize(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = xp + std::to_string(e) + ".";
    const size_t i = static_cast<size_t>(e);
    L->expert_gate[i] = b->TakeLinear(ep + "gate_proj.weight", Ie, H);
    L->expert_up[i] = b->TakeLinear(ep + "up_proj.weight", Ie, H);
    L->expert_down[i] = b->TakeLinear(ep + "down_proj.weight", H, Ie);
  }
  if (L->expert_gate[0].m.data == nullptr && ckpt.Find(xp + "gate_up_proj") != nullptr) {
    b->Problem(xp + "*: the checkpoint stores this layer's experts fused (" + xp +
               "gate_up_proj), but model_type " + cfg.model_type + " stores them one by one (" +
               xp + "{e}.gate_proj.weight)");
  }
}

}  // namespace

StatusOr<Qwen3Weights> BindQwen3Weights(const Qwen3Config& cfg, const SafetensorsCheckpoint& ckpt) {
  Binder b(ckpt, cfg.fp8);
  Qwen3Weights w;
  const std::string& p = cfg.weight_prefix;
  const int64_t H = cfg.hidden, D = cfg.head_dim, I = cfg.intermediate, V = cfg.vocab;
  const int64_t qdim = static_cast<int64_t>(cfg.heads) * D;
  const int64_t kvdim = static_cast<int64_t>(cfg.kv_heads) * D;
  w.embed = b.TakeMatrix(p + "embed_tokens.weight", V, H);
  if (const SafetensorsCheckpoint::Tensor* e = ckpt.Find(p + "embed_tokens.weight")) {
    w.embed_file = e->file->mapping();
  }
  w.final_norm = b.TakeVector(p + "norm.weight", H);
  w.layers.resize(static_cast<size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string lp = p + "layers." + std::to_string(l) + ".";
    Qwen3LayerWeights& L = w.layers[static_cast<size_t>(l)];
    L.input_norm = b.TakeVector(lp + "input_layernorm.weight", H);
    L.q = b.TakeLinear(lp + "self_attn.q_proj.weight", qdim, H);
    L.k = b.TakeLinear(lp + "self_attn.k_proj.weight", kvdim, H);
    L.v = b.TakeLinear(lp + "self_attn.v_proj.weight", kvdim, H);
    L.o = b.TakeLinear(lp + "self_attn.o_proj.weight", H, qdim);
    L.q_norm = b.TakeVector(lp + "self_attn.q_norm.weight", D);
    L.k_norm = b.TakeVector(lp + "self_attn.k_norm.weight", D);
    L.post_norm = b.TakeVector(lp + "post_attention_layernorm.weight", H);
    if (!cfg.IsSparseLayer(l)) {
      L.gate = b.TakeLinear(lp + "mlp.gate_proj.weight", I, H);
      L.up = b.TakeLinear(lp + "mlp.up_proj.weight", I, H);
      L.down = b.TakeLinear(lp + "mlp.down_proj.weight", H, I);
    } else {
      BindExperts(cfg, ckpt, lp + "mlp.", &b, &L);
    }
  }
  const SafetensorsCheckpoint::Tensor* head = ckpt.Find("lm_head.weight");
  if (cfg.tied) {
    w.lm_head = {w.embed, {}};
    if (head != nullptr) {
      // A tied checkpoint may still carry lm_head.weight; accept it only as an exact copy.
      const SafetensorsCheckpoint::Tensor* emb = ckpt.Find(p + "embed_tokens.weight");
      if (emb == nullptr || !SameBytes(head->view, emb->view)) {
        return InvalidArgument("tensor 'lm_head.weight' differs from '" + p +
                               "embed_tokens.weight' but the config sets tie_word_embeddings=true");
      }
      (void)b.Take("lm_head.weight", {V, H});
    }
  } else {
    w.lm_head = b.TakeLinear("lm_head.weight", V, H);
  }
  VLS_RETURN_IF_ERROR(b.Finish(cfg.IsVisionLanguage() ? "model.visual." : ""));
  w.bound_names = b.bound();
  return w;
}

}  // namespace vls
