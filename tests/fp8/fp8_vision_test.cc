// An FP8 vision tower (make-test-model --fp8 --fp8-vision: the blocks' and mergers' Linear
// weights in F8_E4M3 with block scales): it binds, prepares into exactly the bytes of its
// dequantized F32 copy at every precision, encodes identically (fast and reference paths), and
// FP8 where the config or the layer does not allow it is refused naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/dispatch.h"
#include "model/fp8_test_util.h"
#include "model/qwen3_config.h"
#include "model/test_checkpoint.h"
#include "vision/vision_config.h"
#include "vision/vision_model.h"
#include "vision/vision_weights.h"

namespace vls {
namespace {

using fp8_test::Json;
using fp8_test::Tensors;

// A tiny Qwen3-VL whose text and vision Linears are FP8 in 16 x 24 blocks: the tower's 32- and
// 64-wide matrices and the 128-wide mergers end in partial blocks (written once per process).
const std::string& Fp8VisionModel() {
  static const std::string dir = [] {
    const std::string d = fp8_test::Scratch("vision");
    TestModelSpec spec;  // tiny qwen3-vl: hidden 64, vision hidden 32, intermediate 64
    spec.layers = 2;
    spec.deepstack = 1;
    spec.seed = 3;
    spec.fp8 = true;
    spec.fp8_vision = true;
    spec.fp8_block_rows = 16;
    spec.fp8_block_cols = 24;
    EXPECT_TRUE(WriteTestCheckpoint(d, spec, false).ok());
    return d;
  }();
  return dir;
}

VisionConfig LoadVision(const std::string& dir) {
  auto text = LoadQwen3Config(dir);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  auto v = LoadVisionConfig(dir, *text);
  EXPECT_TRUE(v.ok() && v->has_value()) << v.status().ToString();
  return **v;
}

StatusOr<VisionWeights> Bind(const std::string& dir, const SafetensorsCheckpoint** keep) {
  static std::vector<std::unique_ptr<SafetensorsCheckpoint>> open;  // outlive the views
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> ckpt,
                       SafetensorsCheckpoint::Open(dir));
  open.push_back(std::move(ckpt));
  if (keep) *keep = open.back().get();
  return BindVisionWeights(LoadVision(dir), *open.back());
}

TEST(Fp8VisionTest, BindsTheBlocksAndMergersAsFp8AndWidensThemExactly) {
  const SafetensorsCheckpoint* ckpt = nullptr;
  auto w = Bind(Fp8VisionModel(), &ckpt);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(LoadVision(Fp8VisionModel()).fp8->block_rows, 16);
  EXPECT_EQ(w->blocks[0].qkv.w.dtype, DType::kF8E4M3);
  EXPECT_TRUE(w->blocks[0].qkv.w_fp8.fp8());
  EXPECT_TRUE(w->merger.fc2.w_fp8.fp8());
  EXPECT_TRUE(w->deepstack[0].fc1.w_fp8.fp8());
  EXPECT_EQ(w->patch.w.dtype, DType::kBF16);  // a convolution: never FP8
  EXPECT_FALSE(w->patch.w_fp8.fp8());
  // WidenVisionWeight (the reference path) against the formula, an edge-block matrix.
  const VisionRawLinear& fc2 = w->merger.fc2;  // [64, 128]: 16 x 24 blocks end at column 120
  const std::vector<float> got = WidenVisionWeight(fc2);
  const Tensors t = fp8_test::ReadAll(Fp8VisionModel());
  const HostTensor& codes = t.at("model.visual.merger.linear_fc2.weight");
  const std::vector<float> s =
      ToF32Vector(t.at("model.visual.merger.linear_fc2.weight_scale_inv").view());
  ASSERT_EQ(codes.shape(), (Shape{64, 128}));
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t c = 0; c < 128; ++c) {
      const double want = fp8_test::E4M3(static_cast<uint8_t>(codes.data()[r * 128 + c])) *
                          s[static_cast<size_t>((r / 16) * 6 + c / 24)];
      ASSERT_EQ(static_cast<double>(got[static_cast<size_t>(r * 128 + c)]), want) << r << "," << c;
    }
  }
}

TEST(Fp8VisionTest, PreparesAndEncodesExactlyAsTheDequantizedTower) {
  const std::string f32 = fp8_test::Dequantized(Fp8VisionModel(), DType::kF32);
  const VisionConfig cfg = LoadVision(Fp8VisionModel());
  std::mt19937 rng(1);
  std::normal_distribution<float> n;
  const std::vector<GridThw> grids = {{1, 2, 4}};
  const int64_t rows = 8;
  std::vector<float> px(static_cast<size_t>(rows * cfg.patch_dim()));
  for (float& x : px) x = n(rng);
  for (kernels::Precision p :
       {kernels::Precision::kF32, kernels::Precision::kBF16, kernels::Precision::kInt8}) {
    const kernels::Context ctx(2, p, nullptr);
    auto a = VisionModel::Load(Fp8VisionModel(), cfg, ctx);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = VisionModel::Load(f32, LoadVision(f32), ctx);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ((*a)->LayoutText(), (*b)->LayoutText());
    for (bool reference : {false, true}) {
      if (reference && p != kernels::Precision::kF32) continue;
      auto ea = reference ? (*a)->ReferenceEncode(px, rows, grids, nullptr)
                          : (*a)->Encode(px, rows, grids, nullptr);
      auto eb = reference ? (*b)->ReferenceEncode(px, rows, grids, nullptr)
                          : (*b)->Encode(px, rows, grids, nullptr);
      ASSERT_TRUE(ea.ok() && eb.ok());
      ASSERT_EQ(ea->embeds.size(), eb->embeds.size());
      EXPECT_EQ(std::memcmp(ea->embeds.data(), eb->embeds.data(), ea->embeds.size() * 4), 0)
          << kernels::PrecisionName(p) << (reference ? " reference" : "");
      EXPECT_EQ(std::memcmp(ea->deepstack.data(), eb->deepstack.data(), ea->deepstack.size() * 4),
                0);
    }
  }
}

void ExpectBindError(const std::string& dir, const std::string& needle) {
  auto w = Bind(dir, nullptr);
  ASSERT_FALSE(w.ok()) << dir;
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument) << w.status().ToString();
  EXPECT_NE(w.status().message().find(needle), std::string::npos)
      << needle << " in " << w.status().ToString();
}

TEST(Fp8VisionTest, RefusesFp8TheConfigOrTheLayerDoesNotAllow) {
  ExpectBindError(
      fp8_test::Variant(
          Fp8VisionModel(), "visual_excluded", nullptr,
          [](Json& c) { c["quantization_config"]["modules_to_not_convert"] = {"model.visual"}; }),
      "modules_to_not_convert lists its module ('model.visual')");
  ExpectBindError(fp8_test::Variant(Fp8VisionModel(), "patch_fp8",
                                    [](Tensors& t) {
                                      HostTensor& p = t.at("model.visual.patch_embed.proj.weight");
                                      p = FromF32As(DType::kF8E4M3, p.shape(),
                                                    ToF32Vector(p.view()));
                                    }),
                  "'model.visual.patch_embed.proj.weight' has dtype F8_E4M3");
  ExpectBindError(
      fp8_test::Variant(
          Fp8VisionModel(), "vision_no_scale",
          [](Tensors& t) { t.erase("model.visual.blocks.1.mlp.linear_fc1.weight_scale_inv"); }),
      "'model.visual.blocks.1.mlp.linear_fc1.weight_scale_inv' are missing");
  // A NaN code is found when the tower is prepared.
  const std::string nan = fp8_test::Variant(Fp8VisionModel(), "vision_nan", [](Tensors& t) {
    t.at("model.visual.blocks.0.attn.proj.weight").data()[33] = std::byte{0xFF};
  });
  const kernels::Context ctx(2, kernels::Precision::kBF16, nullptr);
  auto m = VisionModel::Load(nan, LoadVision(nan), ctx);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("'model.visual.blocks.0.attn.proj.weight' holds the F8_E4M3 "
                                      "NaN code at [1, 1]"),
            std::string::npos)
      << m.status().ToString();
}

}  // namespace
}  // namespace vls
