// Mixture-of-experts checkpoints (ADR 0027): make-test-model's writer in both expert layouts,
// read back by the config parser and bound by BindQwen3Weights; every mismatched checkpoint is
// refused naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "model/fp8_test_util.h"
#include "model/qwen3_config.h"
#include "model/qwen3_weights.h"
#include "model/test_checkpoint.h"
#include "vision/vision_config.h"

namespace vls {
namespace {

using fp8_test::Json;
using fp8_test::Tensors;

// Tiny MoE specs: 3 layers, sparse step 1 with layer 0 dense (a mixed model), E 6, k 2,
// I_e 24 (2·I_e != H and I_e != H, so a transposed tensor cannot pass).
TestModelSpec MoeSpec(const std::string& arch) {
  TestModelSpec s;
  s.arch = arch;
  s.hidden = 64, s.layers = 3, s.heads = 4, s.kv_heads = 2, s.head_dim = 16;
  s.intermediate = 80, s.vocab = 300, s.tied = false, s.seed = 11;
  s.experts = 6, s.top_k = 2, s.moe_intermediate = 24, s.mlp_only_layers = {0};
  s.dtype = DType::kF32;
  if (arch == "qwen3-moe") s.deepstack = 0, s.vision = false;
  return s;
}

const std::string& Written(const std::string& arch) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(arch);
  if (it != dirs.end()) return it->second;
  const std::string d = test::ScratchPath("vls_moe_weights_test_", arch);
  Status st = WriteTestCheckpoint(d, MoeSpec(arch), false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return dirs.emplace(arch, d).first->second;
}

struct Loaded {
  Qwen3Config cfg;
  std::unique_ptr<SafetensorsCheckpoint> ckpt;
  StatusOr<Qwen3Weights> weights = Internal("not bound");
};

Loaded Load(const std::string& dir) {
  Loaded l;
  auto cfg = LoadQwen3Config(dir);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return l;
  l.cfg = *cfg;
  auto ckpt = SafetensorsCheckpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (!ckpt.ok()) return l;
  l.ckpt = std::move(*ckpt);
  l.weights = BindQwen3Weights(l.cfg, *l.ckpt);
  return l;
}

void ExpectBindError(const std::string& dir, const std::vector<std::string>& needles) {
  Loaded l = Load(dir);
  ASSERT_FALSE(l.weights.ok()) << dir;
  for (const std::string& n : needles) {
    EXPECT_NE(l.weights.status().message().find(n), std::string::npos)
        << "no '" << n << "' in: " << l.weights.status().message();
  }
}

TEST(MoeWeightsTest, PerExpertCheckpointRoundTrips) {
  Loaded l = Load(Written("qwen3-moe"));
  ASSERT_TRUE(l.weights.ok()) << l.weights.status().ToString();
  EXPECT_EQ(l.cfg.model_type, "qwen3_moe");
  ASSERT_TRUE(l.cfg.moe.has_value());
  EXPECT_EQ(l.cfg.moe->layout, MoeLayout::kPerExpert);
  EXPECT_EQ(l.cfg.moe->experts, 6);
  EXPECT_EQ(l.cfg.moe->top_k, 2);
  EXPECT_EQ(l.cfg.moe->expert_intermediate, 24);
  EXPECT_EQ(l.cfg.moe->mlp_only_layers, (std::vector<int>{0}));
  EXPECT_TRUE(l.cfg.moe->norm_topk_prob);
  const Qwen3Weights& w = *l.weights;
  // Layer 0 dense, layers 1 and 2 sparse.
  EXPECT_NE(w.layers[0].gate.m.data, nullptr);
  EXPECT_EQ(w.layers[0].router.m.data, nullptr);
  EXPECT_TRUE(w.layers[0].expert_gate.empty());
  for (int l2 : {1, 2}) {
    const Qwen3LayerWeights& L = w.layers[static_cast<size_t>(l2)];
    EXPECT_EQ(L.gate.m.data, nullptr);
    EXPECT_EQ(L.router.m.rows, 6);
    EXPECT_EQ(L.router.m.cols, 64);
    ASSERT_EQ(L.expert_gate.size(), 6u);
    ASSERT_EQ(L.expert_down.size(), 6u);
    for (int e = 0; e < 6; ++e) {
      EXPECT_EQ(L.expert_gate[e].m.rows, 24);
      EXPECT_EQ(L.expert_up[e].m.cols, 64);
      EXPECT_EQ(L.expert_down[e].m.rows, 64);
      EXPECT_EQ(L.expert_down[e].m.cols, 24);
      EXPECT_NE(L.expert_up[e].m.data, nullptr);
    }
    EXPECT_EQ(L.fused_gate_up.data, nullptr);
  }
  // The artifact identity lists the expert tensors.
  const std::set<std::string> bound(w.bound_names.begin(), w.bound_names.end());
  EXPECT_TRUE(bound.count("model.layers.2.mlp.experts.5.down_proj.weight"));
  EXPECT_TRUE(bound.count("model.layers.1.mlp.gate.weight"));
  EXPECT_FALSE(bound.count("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_TRUE(bound.count("model.layers.0.mlp.gate_proj.weight"));
}

TEST(MoeWeightsTest, FusedCheckpointRoundTrips) {
  Loaded l = Load(Written("qwen3-vl-moe"));
  ASSERT_TRUE(l.weights.ok()) << l.weights.status().ToString();
  EXPECT_EQ(l.cfg.model_type, "qwen3_vl_moe");
  EXPECT_TRUE(l.cfg.IsVisionLanguage());
  EXPECT_EQ(l.cfg.position_mode, PositionMode::kMrope);
  ASSERT_TRUE(l.cfg.deepstack.has_value());
  ASSERT_TRUE(l.cfg.moe.has_value());
  EXPECT_EQ(l.cfg.moe->layout, MoeLayout::kFused);
  const Qwen3LayerWeights& L = l.weights->layers[1];
  EXPECT_EQ(L.fused_gate_up.rows, 6 * 64);
  EXPECT_EQ(L.fused_gate_up.cols, 2 * 24);
  EXPECT_EQ(L.fused_down.rows, 6 * 24);
  EXPECT_EQ(L.fused_down.cols, 64);
  EXPECT_TRUE(L.expert_gate.empty());
  EXPECT_NE(l.weights->layers[0].down.m.data, nullptr);
  const std::set<std::string> bound(l.weights->bound_names.begin(), l.weights->bound_names.end());
  EXPECT_TRUE(bound.count("model.language_model.layers.2.mlp.experts.gate_up_proj"));
  EXPECT_TRUE(bound.count("model.language_model.layers.2.mlp.experts.down_proj"));
  // The same vision tower as qwen3_vl.
  auto vision = LoadVisionConfig(Written("qwen3-vl-moe"), l.cfg);
  ASSERT_TRUE(vision.ok()) << vision.status().ToString();
  EXPECT_TRUE(vision->has_value());
}

// On N(0, 1) rows normed to RMS 1, the router's logits are O(1) and rows choose different
// experts (oracle cases fail on a degenerate router).
TEST(MoeWeightsTest, RandomRouterRoutesRowsDifferently) {
  for (const std::string arch : {"qwen3-moe", "qwen3-vl-moe"}) {
    Loaded l = Load(Written(arch));
    ASSERT_TRUE(l.weights.ok());
    const kernels::Matrix& r = l.weights->layers[1].router.m;
    const std::vector<float> router =
        ToF32Vector(l.ckpt->Find(l.cfg.weight_prefix + "layers.1.mlp.gate.weight")->view);
    const std::vector<float> embed =
        ToF32Vector(l.ckpt->Find(l.cfg.weight_prefix + "embed_tokens.weight")->view);
    std::set<int> firsts;
    double max_abs = 0;
    for (int row = 0; row < 32; ++row) {
      const float* x = embed.data() + row * r.cols;
      double ss = 0;
      for (int64_t i = 0; i < r.cols; ++i) ss += double{x[i]} * x[i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(r.cols));
      int best = 0;
      double best_logit = -1e300;
      for (int64_t e = 0; e < r.rows; ++e) {
        double logit = 0;
        for (int64_t i = 0; i < r.cols; ++i) logit += router[e * r.cols + i] * x[i] * inv;
        max_abs = std::max(max_abs, std::fabs(logit));
        if (logit > best_logit) best_logit = logit, best = static_cast<int>(e);
      }
      firsts.insert(best);
    }
    EXPECT_GE(firsts.size(), 4u) << arch;
    EXPECT_LT(max_abs, 8.0) << arch;
    EXPECT_GT(max_abs, 0.5) << arch;
  }
}

TEST(MoeWeightsTest, WriterIsDeterministic) {
  const std::string d = test::ScratchPath("vls_moe_weights_test_", "again");
  ASSERT_TRUE(WriteTestCheckpoint(d, MoeSpec("qwen3-vl-moe"), false).ok());
  auto a = ReadFileAtMost(JoinPath(d, "model.safetensors"), 1 << 26);
  auto b = ReadFileAtMost(JoinPath(Written("qwen3-vl-moe"), "model.safetensors"), 1 << 26);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
}

TEST(MoeWeightsTest, Fp8PerExpertCheckpointBinds) {
  TestModelSpec s = MoeSpec("qwen3-moe");
  s.fp8 = true;
  s.fp8_block_rows = 16, s.fp8_block_cols = 16;
  s.dtype = DType::kBF16;
  const std::string d = test::ScratchPath("vls_moe_weights_test_", "fp8");
  ASSERT_TRUE(WriteTestCheckpoint(d, s, false).ok());
  Loaded l = Load(d);
  ASSERT_TRUE(l.weights.ok()) << l.weights.status().ToString();
  const Qwen3LayerWeights& L = l.weights->layers[2];
  EXPECT_EQ(L.expert_gate[3].m.dtype, DType::kF8E4M3);
  EXPECT_TRUE(L.expert_down[5].fp8.fp8());
  EXPECT_EQ(L.router.m.dtype, DType::kBF16);
  const std::set<std::string> bound(l.weights->bound_names.begin(), l.weights->bound_names.end());
  EXPECT_TRUE(bound.count("model.layers.1.mlp.experts.0.up_proj.weight_scale_inv"));
  // The fused layout has no FP8 form: the writer refuses it by name.
  TestModelSpec f = MoeSpec("qwen3-vl-moe");
  f.fp8 = true;
  Status st = WriteTestCheckpoint(test::ScratchPath("vls_moe_weights_test_", "fp8f"), f, false);
  EXPECT_NE(st.message().find("FP8 checkpoints of the fused expert layout"), std::string::npos)
      << st.ToString();
}

// Shards are written while the tensors are generated (one shard in memory at a time): the
// same tensors, bytes and order as one file, and an index whose total_size is their sum.
TEST(MoeWeightsTest, ShardedWriterMatchesOneFile) {
  for (const std::string arch : {"qwen3-moe", "qwen3-vl-moe"}) {
    TestModelSpec s = MoeSpec(arch);
    s.shards = 4;
    if (arch == "qwen3-moe") s.fp8 = true, s.fp8_block_rows = 16, s.fp8_block_cols = 16;
    const std::string one = test::ScratchPath("vls_moe_weights_test_", arch + "_one");
    const std::string four = test::ScratchPath("vls_moe_weights_test_", arch + "_four");
    ASSERT_TRUE(WriteTestCheckpoint(four, s, false).ok());
    s.shards = 1;
    ASSERT_TRUE(WriteTestCheckpoint(one, s, false).ok());
    auto a = SafetensorsCheckpoint::Open(one);
    auto b = SafetensorsCheckpoint::Open(four);
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    ASSERT_EQ((*a)->Names(), (*b)->Names());
    uint64_t total = 0;
    for (const std::string& n : (*a)->Names()) {
      const TensorView& x = (*a)->Find(n)->view;
      const TensorView& y = (*b)->Find(n)->view;
      ASSERT_EQ(x.nbytes, y.nbytes) << n;
      EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << n;
      total += x.nbytes;
    }
    auto index = ReadFileAtMost(JoinPath(four, "model.safetensors.index.json"), 1 << 20);
    ASSERT_TRUE(index.ok());
    const Json j = Json::parse(*index);
    EXPECT_EQ(j["metadata"]["total_size"].get<uint64_t>(), total) << arch;
    EXPECT_TRUE(std::filesystem::exists(JoinPath(four, "model-00004-of-00004.safetensors")));
    Loaded l = Load(four);
    EXPECT_TRUE(l.weights.ok()) << l.weights.status().ToString();
  }
}

TEST(MoeWeightsHostileTest, MissingExpertTensorIsNamed) {
  const std::string d = fp8_test::Variant(Written("qwen3-moe"), "missing", [](Tensors& t) {
    t.erase("model.layers.2.mlp.experts.4.up_proj.weight");
  });
  ExpectBindError(d, {"missing tensors (1): model.layers.2.mlp.experts.4.up_proj.weight"});
}

TEST(MoeWeightsHostileTest, WrongFusedShapeIsNamed) {
  // The transposed (transformers v5 in-memory) form [E, 2·I_e, H] is not the checkpoint's.
  const std::string d = fp8_test::Variant(Written("qwen3-vl-moe"), "transposed", [](Tensors& t) {
    const std::string n = "model.language_model.layers.1.mlp.experts.gate_up_proj";
    t[n] = FromF32As(DType::kF32, {6, 48, 64}, std::vector<float>(6 * 48 * 64, 0.5f));
  });
  ExpectBindError(d, {"tensor 'model.language_model.layers.1.mlp.experts.gate_up_proj' has "
                      "shape [6,48,64] but the config requires [6,64,48]"});
  const std::string d2 = fp8_test::Variant(Written("qwen3-vl-moe"), "router", [](Tensors& t) {
    const std::string n = "model.language_model.layers.2.mlp.gate.weight";
    t[n] = FromF32As(DType::kF32, {7, 64}, std::vector<float>(7 * 64, 0.5f));
  });
  ExpectBindError(d2, {"model.language_model.layers.2.mlp.gate.weight' has shape [7,64]"});
}

TEST(MoeWeightsHostileTest, UnexpectedTensorIsNamed) {
  const std::string d = fp8_test::Variant(Written("qwen3-moe"), "extra", [](Tensors& t) {
    // An expert beyond num_experts, and a dense MLP in a sparse layer.
    t["model.layers.1.mlp.experts.6.gate_proj.weight"] =
        FromF32As(DType::kF32, {24, 64}, std::vector<float>(24 * 64, 0.0f));
    t["model.layers.2.mlp.gate_proj.weight"] =
        FromF32As(DType::kF32, {80, 64}, std::vector<float>(80 * 64, 0.0f));
  });
  ExpectBindError(d, {"unexpected tensors (2):", "model.layers.1.mlp.experts.6.gate_proj.weight",
                      "model.layers.2.mlp.gate_proj.weight"});
}

TEST(MoeWeightsHostileTest, OtherLayoutIsNamed) {
  // Per-expert tensors in a qwen3_vl_moe checkpoint, and fused ones in a qwen3_moe one.
  const std::string d = fp8_test::Variant(Written("qwen3-vl-moe"), "per_in_fused", [](Tensors& t) {
    const std::string p = "model.language_model.layers.1.mlp.experts.";
    t.erase(p + "gate_up_proj");
    t.erase(p + "down_proj");
    for (int e = 0; e < 6; ++e) {
      for (const char* n : {"gate_proj", "up_proj"}) {
        t[p + std::to_string(e) + "." + n + ".weight"] =
            FromF32As(DType::kF32, {24, 64}, std::vector<float>(24 * 64, 0.0f));
      }
      t[p + std::to_string(e) + ".down_proj.weight"] =
          FromF32As(DType::kF32, {64, 24}, std::vector<float>(64 * 24, 0.0f));
    }
  });
  ExpectBindError(
      d, {"missing tensors (2): model.language_model.layers.1.mlp.experts.gate_up_proj",
          "the checkpoint stores this layer's experts one by one", "unexpected tensors (18)"});
  const std::string d2 = fp8_test::Variant(Written("qwen3-moe"), "fused_in_per", [](Tensors& t) {
    for (int e = 0; e < 6; ++e) {
      for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
        t.erase("model.layers.1.mlp.experts." + std::to_string(e) + "." + p + ".weight");
      }
    }
    t["model.layers.1.mlp.experts.gate_up_proj"] =
        FromF32As(DType::kF32, {6, 64, 48}, std::vector<float>(6 * 64 * 48, 0.0f));
    t["model.layers.1.mlp.experts.down_proj"] =
        FromF32As(DType::kF32, {6, 24, 64}, std::vector<float>(6 * 24 * 64, 0.0f));
  });
  ExpectBindError(d2, {"model.layers.1.mlp.experts.*: the checkpoint stores this layer's experts "
                       "fused",
                       "unexpected tensors (2)"});
}

TEST(MoeWeightsTest, NamedShapesAreTheReleasedOnes) {
  auto vl = NamedTestShape("qwen3-vl-30b-a3b");
  ASSERT_TRUE(vl.ok());
  EXPECT_EQ(vl->arch, "qwen3-vl-moe");
  EXPECT_EQ(vl->layers, 48);
  EXPECT_EQ(vl->experts, 128);
  EXPECT_EQ(vl->top_k, 8);
  EXPECT_EQ(vl->moe_intermediate, 768);
  EXPECT_EQ(vl->vision_depth, 27);
  EXPECT_EQ(vl->vision_ds_indexes, (std::vector<int>{8, 16, 24}));
  auto t = NamedTestShape("qwen3-30b-a3b");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->arch, "qwen3-moe");
  EXPECT_FALSE(t->tied);
  EXPECT_TRUE(t->norm_topk_prob);
  // The sparse-layer rule of the writer is the config's.
  TestModelSpec s = MoeSpec("qwen3-moe");
  s.sparse_step = 2, s.mlp_only_layers = {3}, s.layers = 6;
  EXPECT_FALSE(TestLayerIsSparse(s, 0));
  EXPECT_TRUE(TestLayerIsSparse(s, 1));
  EXPECT_FALSE(TestLayerIsSparse(s, 3));
  EXPECT_TRUE(TestLayerIsSparse(s, 5));
}

}  // namespace
}  // namespace vls
