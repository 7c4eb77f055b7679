// Test helpers: a random vision tower checkpoint with weights scaled so that activations stay
// O(1) through every block (unlike make-test-model's stddev 0.02), and random inputs.
#ifndef VLSTACK_VISION_VISION_TEST_UTIL_H_
#define VLSTACK_VISION_VISION_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/file.h"
#include "base/scratch_test_util.h"
#include "io/safetensors.h"
#include "tensor/grid_thw.h"
#include "tensor/tensor.h"
#include "vision/vision_config.h"

namespace vls::vision_test {

inline VisionConfig SmallConfig() {
  VisionConfig c;
  c.depth = 3;
  c.hidden = 48;
  c.intermediate = 80;
  c.heads = 3;  // head_dim 16
  c.num_position_embeddings = 36;
  c.out_hidden = 40;
  c.deepstack_visual_indexes = {0, 2};
  c.patch_size = 4;  // patch_dim 3·2·4·4 = 96
  return c;
}

// A fresh folder per process and name (CTest runs test cases as concurrent processes), removed
// when the process exits.
inline std::string TempDir(const std::string& name) {
  const std::string p = test::ScratchPath("vls_vision_", name);
  std::filesystem::create_directories(p);
  return p;
}

struct CheckpointOptions {
  DType dtype = DType::kF32;
  uint64_t seed = 1;
  // Tensors to leave out, or to write with another shape / dtype (negative tests).
  std::string drop;
  std::string reshape;  // written as [1, n] instead of its shape
  std::string extra;    // an extra tensor of this name
};

// The model.visual.* tensors of `c` in HF names and shapes.
inline std::vector<std::pair<std::string, Shape>> VisionTensorShapes(const VisionConfig& c) {
  const int64_t Dv = c.hidden, Iv = c.intermediate, Md = c.merged_dim(), O = c.out_hidden;
  std::vector<std::pair<std::string, Shape>> t = {
      {"patch_embed.proj.weight",
       {Dv, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size}},
      {"patch_embed.proj.bias", {Dv}},
      {"pos_embed.weight", {c.num_position_embeddings, Dv}},
  };
  for (int j = 0; j < c.depth; ++j) {
    const std::string p = "blocks." + std::to_string(j) + ".";
    for (const char* n : {"norm1", "norm2"}) {
      t.push_back({p + n + ".weight", {Dv}});
      t.push_back({p + n + ".bias", {Dv}});
    }
    t.push_back({p + "attn.qkv.weight", {3 * Dv, Dv}});
    t.push_back({p + "attn.qkv.bias", {3 * Dv}});
    t.push_back({p + "attn.proj.weight", {Dv, Dv}});
    t.push_back({p + "attn.proj.bias", {Dv}});
    t.push_back({p + "mlp.linear_fc1.weight", {Iv, Dv}});
    t.push_back({p + "mlp.linear_fc1.bias", {Iv}});
    t.push_back({p + "mlp.linear_fc2.weight", {Dv, Iv}});
    t.push_back({p + "mlp.linear_fc2.bias", {Dv}});
  }
  const auto merger = [&](const std::string& p, int64_t norm) {
    t.push_back({p + "norm.weight", {norm}});
    t.push_back({p + "norm.bias", {norm}});
    t.push_back({p + "linear_fc1.weight", {Md, Md}});
    t.push_back({p + "linear_fc1.bias", {Md}});
    t.push_back({p + "linear_fc2.weight", {O, Md}});
    t.push_back({p + "linear_fc2.bias", {O}});
  };
  merger("merger.", Dv);
  for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
    merger("deepstack_merger_list." + std::to_string(k) + ".", Md);
  }
  return t;
}

// Writes dir/model.safetensors: matrices N(0, 1/in) (q/k rows N(0, 4/in), so attention is far
// from uniform), biases N(0, 0.1²), norm weights 1 + N(0, 0.1²), positions N(0, 0.5²).
inline Status WriteVisionCheckpoint(const std::string& dir, const VisionConfig& c,
                                    const CheckpointOptions& o = {}) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<NamedTensor> named;
  std::vector<HostTensor> owned;
  owned.reserve(1024);
  for (auto [short_name, shape] : VisionTensorShapes(c)) {
    if (short_name == o.drop) continue;
    const int64_t n = NumElements(shape);
    const int64_t in = shape.size() > 1 ? n / shape[0] : 1;
    double mean = 0, sd = 0.1;
    if (shape.size() > 1) sd = 1.0 / std::sqrt(static_cast<double>(in));
    if (short_name.find("qkv.weight") != std::string::npos) sd *= 2;
    if (short_name.find("norm") != std::string::npos && short_name.ends_with(".weight")) mean = 1;
    if (short_name == "pos_embed.weight") sd = 0.5;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(mean + sd * normal(rng));
    if (short_name == o.reshape) shape = {1, n};
    owned.push_back(FromF32As(o.dtype, shape, v));
    named.push_back({"model.visual." + short_name, owned.back().view()});
  }
  if (!o.extra.empty()) {
    owned.push_back(FromF32As(DType::kF32, {2}, std::vector<float>{1, 2}));
    named.push_back({o.extra, owned.back().view()});
  }
  return WriteSafetensors(JoinPath(dir, "model.safetensors"), named);
}

// Uniform [-1, 1) pixel rows for `grids`.
inline std::vector<float> RandomPixels(const VisionConfig& c, std::span<const GridThw> grids,
                                       uint64_t seed, int64_t* rows) {
  *rows = 0;
  for (const GridThw& g : grids) *rows += int64_t{g.t} * g.h * g.w;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(*rows * c.patch_dim()));
  for (float& x : v) x = u(rng);
  return v;
}

// max|a − b| / max|b| (0 when both are empty).
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  if (a.size() != b.size()) return INFINITY;
  return den > 0 ? num / den : num;
}

}  // namespace vls::vision_test

#endif  // VLSTACK_VISION_VISION_TEST_UTIL_H_
