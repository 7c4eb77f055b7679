// The vision tower: fast path against the scalar reference in every precision, segmentation,
// merge-window invariants, refused inputs and checkpoints.
#include "vision/vision_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/qwen3_config.h"
#include "model/test_checkpoint.h"
#include "vision/vision_test_util.h"

namespace vls {
namespace {

using vision_test::RandomPixels;
using vision_test::RelErr;
using vision_test::SmallConfig;

std::string SmallDir(DType dtype) {
  const std::string dir =
      vision_test::TempDir(std::string("small_") + std::string(DTypeName(dtype)));
  vision_test::CheckpointOptions o;
  o.dtype = dtype;
  EXPECT_TRUE(vision_test::WriteVisionCheckpoint(dir, SmallConfig(), o).ok());
  return dir;
}

// Two images (one non-square, one larger than the 6x6 position grid) and a 2-frame video.
const std::vector<GridThw> kGrids = {{1, 4, 6}, {1, 8, 8}, {2, 2, 4}};

struct Encoded {
  VisionOutput out;
  VisionDiagnostics diag;
};

Encoded EncodeWith(const VisionModel& m, const std::vector<GridThw>& grids, bool reference,
                   uint64_t seed = 7) {
  int64_t rows = 0;
  const std::vector<float> px = RandomPixels(m.config(), grids, seed, &rows);
  Encoded r;
  auto out =
      reference ? m.ReferenceEncode(px, rows, grids, &r.diag) : m.Encode(px, rows, grids, &r.diag);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (out.ok()) r.out = std::move(*out);
  return r;
}

// Worst relative error over every output and diagnostic tensor.
double WorstRelErr(const Encoded& a, const Encoded& b) {
  double worst =
      std::max(RelErr(a.out.embeds, b.out.embeds), RelErr(a.out.deepstack, b.out.deepstack));
  worst = std::max(worst, RelErr(a.diag.patch_embeds, b.diag.patch_embeds));
  worst = std::max(worst, RelErr(a.diag.pos_embeds, b.diag.pos_embeds));
  EXPECT_EQ(a.diag.blocks.size(), b.diag.blocks.size());
  for (size_t j = 0; j < a.diag.blocks.size() && j < b.diag.blocks.size(); ++j) {
    worst = std::max(worst, RelErr(a.diag.blocks[j], b.diag.blocks[j]));
  }
  return worst;
}

void ExpectFastMatchesReference(kernels::Precision precision, DType dtype,
                                const kernels::KernelVariant* variant, double tol) {
  const kernels::Context ctx(2, precision, variant);
  auto m = VisionModel::Load(SmallDir(dtype), SmallConfig(), ctx);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Encoded fast = EncodeWith(**m, kGrids, false);
  const Encoded ref = EncodeWith(**m, kGrids, true);
  const int64_t nv = (4 * 6 + 8 * 8 + 2 * 2 * 4) / 4;
  EXPECT_EQ(fast.out.tokens, nv);
  EXPECT_EQ(fast.out.embeds.size(), static_cast<size_t>(nv * 40));
  EXPECT_EQ(fast.out.deepstack.size(), static_cast<size_t>(2 * nv * 40));
  const double err = WorstRelErr(fast, ref);
  EXPECT_LE(err, tol);
  std::printf("[%s %s %s] worst relative error %.3g\n", kernels::PrecisionName(precision),
              std::string(DTypeName(dtype)).c_str(), ctx.variant().name, err);
}

TEST(VisionModelTest, FastMatchesReferenceF32) {
  ExpectFastMatchesReference(kernels::Precision::kF32, DType::kF32, nullptr, 1e-5);
  ExpectFastMatchesReference(kernels::Precision::kF32, DType::kBF16, nullptr, 1e-5);
}

TEST(VisionModelTest, FastMatchesReferenceWithEveryKernelVariant) {
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    ExpectFastMatchesReference(kernels::Precision::kF32, DType::kF32, v, 1e-5);
  }
}

// Rounding (BF16) and quantization (Q8) errors grow through the random blocks (measured on
// this config: BF16 0.028, INT8 0.091 after the third block, 0.002 / 0.008 after the patch
// embedding).
TEST(VisionModelTest, FastMatchesReferenceBf16) {
  ExpectFastMatchesReference(kernels::Precision::kBF16, DType::kF32, nullptr, 5e-2);
}

TEST(VisionModelTest, FastMatchesReferenceInt8) {
  ExpectFastMatchesReference(kernels::Precision::kInt8, DType::kF32, nullptr, 0.15);
}

TEST(VisionModelTest, ImagesInOneCallEqualEachAlone) {
  const kernels::Context ctx(2, kernels::Precision::kF32);
  auto m = VisionModel::Load(SmallDir(DType::kF32), SmallConfig(), ctx);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const VisionModel& model = **m;
  const int64_t dim = model.config().patch_dim(), O = model.config().out_hidden;
  int64_t rows = 0;
  const std::vector<float> px = RandomPixels(model.config(), kGrids, 3, &rows);
  auto all = model.Encode(px, rows, kGrids, nullptr);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  int64_t row0 = 0, tok0 = 0;
  const int64_t K = 2, nv = all->tokens;
  for (const GridThw& g : kGrids) {
    const int64_t r = int64_t{g.t} * g.h * g.w, nt = r / 4;
    const std::vector<float> part(px.begin() + row0 * dim, px.begin() + (row0 + r) * dim);
    const GridThw one[1] = {g};
    auto alone = model.Encode(part, r, one, nullptr);
    ASSERT_TRUE(alone.ok());
    const std::vector<float> slice(all->embeds.begin() + tok0 * O,
                                   all->embeds.begin() + (tok0 + nt) * O);
    EXPECT_LE(RelErr(slice, alone->embeds), 1e-6) << GridToString(g);
    for (int64_t k = 0; k < K; ++k) {
      const auto base = all->deepstack.begin() + (k * nv + tok0) * O;
      const std::vector<float> ds(base, base + nt * O);
      const std::vector<float> ds_alone(alone->deepstack.begin() + k * nt * O,
                                        alone->deepstack.begin() + (k + 1) * nt * O);
      EXPECT_LE(RelErr(ds, ds_alone), 1e-6) << GridToString(g) << " level " << k;
    }
    row0 += r;
    tok0 += nt;
  }
}

// A 2-frame "video" of one frame repeated: each temporal group is its own attention segment
// with the same positions, so both halves of every output are equal.
TEST(VisionModelTest, RepeatedFramesGiveRepeatedTokens) {
  const kernels::Context ctx(2, kernels::Precision::kF32);
  auto m = VisionModel::Load(SmallDir(DType::kF32), SmallConfig(), ctx);
  ASSERT_TRUE(m.ok());
  const std::vector<GridThw> frame = {{1, 4, 6}}, video = {{2, 4, 6}};
  int64_t rows = 0;
  std::vector<float> px = RandomPixels((*m)->config(), frame, 5, &rows);
  std::vector<float> twice = px;
  twice.insert(twice.end(), px.begin(), px.end());
  auto out = (*m)->Encode(twice, 2 * rows, video, nullptr);
  ASSERT_TRUE(out.ok());
  const size_t half = out->embeds.size() / 2;
  for (size_t i = 0; i < half; ++i) ASSERT_EQ(out->embeds[i], out->embeds[half + i]) << i;
}

// With the image grid equal to the position grid, align_corners samples the table exactly:
// pos_embeds rows are the table rows in merge-window order.
TEST(VisionModelTest, PositionsFollowMergeWindowOrder) {
  const kernels::Context ctx(1, kernels::Precision::kF32);
  const std::string dir = SmallDir(DType::kF32);
  auto m = VisionModel::Load(dir, SmallConfig(), ctx);
  ASSERT_TRUE(m.ok());
  const std::vector<GridThw> g = {{1, 6, 6}};
  const Encoded fast = EncodeWith(**m, g, false);
  auto ckpt = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const std::vector<float> table =
      ToF32Vector((*ckpt)->Find("model.visual.pos_embed.weight")->view);
  const int64_t Dv = 48;
  int64_t row = 0;
  for (int bh = 0; bh < 3; ++bh)
    for (int bw = 0; bw < 3; ++bw)
      for (int ih = 0; ih < 2; ++ih)
        for (int iw = 0; iw < 2; ++iw, ++row) {
          const int64_t t = (bh * 2 + ih) * 6 + (bw * 2 + iw);
          for (int64_t d = 0; d < Dv; ++d) {
            ASSERT_NEAR(fast.diag.pos_embeds[static_cast<size_t>(row * Dv + d)],
                        table[static_cast<size_t>(t * Dv + d)], 1e-6)
                << "row " << row;
          }
        }
}

TEST(VisionModelTest, RefusesBadInputs) {
  const kernels::Context ctx(1, kernels::Precision::kF32);
  auto m = VisionModel::Load(SmallDir(DType::kF32), SmallConfig(), ctx);
  ASSERT_TRUE(m.ok());
  const VisionModel& model = **m;
  const std::vector<GridThw> g = {{1, 4, 4}};
  int64_t rows = 0;
  std::vector<float> px = RandomPixels(model.config(), g, 1, &rows);
  const auto code = [&](std::span<const float> p, int64_t r, std::vector<GridThw> grids) {
    return model.Encode(p, r, grids, nullptr).status();
  };
  Status s = code(px, rows - 1, g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rows"), std::string::npos) << s.ToString();
  s = code(std::span<const float>(px).subspan(1), rows, g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = code(px, rows, {{1, 4, 3}});  // w not divisible by the merge size
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = code(px, rows, {{0, 4, 4}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = code(px, rows, {{1, 512, 512}});  // over kMaxVisionPatches, before any size check
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  std::vector<float> bad = px;
  bad[100] = std::numeric_limits<float>::quiet_NaN();
  s = code(bad, rows, g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("pixel_values[1, 4]"), std::string::npos) << s.ToString();
  bad[100] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(model.ReferenceEncode(bad, rows, g, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  // No items: no tokens.
  auto none = model.Encode({}, 0, {}, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tokens, 0);
  EXPECT_TRUE(none->embeds.empty());
}

Status LoadWith(const vision_test::CheckpointOptions& o, const std::string& name) {
  const std::string dir = vision_test::TempDir(name);
  EXPECT_TRUE(vision_test::WriteVisionCheckpoint(dir, SmallConfig(), o).ok());
  const kernels::Context ctx(1, kernels::Precision::kF32);
  return VisionModel::Load(dir, SmallConfig(), ctx).status();
}

TEST(VisionModelTest, RefusesMismatchedCheckpoints) {
  vision_test::CheckpointOptions o;
  o.drop = "blocks.1.attn.qkv.bias";
  Status s = LoadWith(o, "drop");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("model.visual.blocks.1.attn.qkv.bias"), std::string::npos)
      << s.ToString();
  o = {};
  o.reshape = "merger.linear_fc2.weight";
  s = LoadWith(o, "reshape");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.visual.merger.linear_fc2.weight' has shape [1,7680]"),
            std::string::npos)
      << s.ToString();
  o = {};
  o.extra = "model.visual.blocks.3.norm1.weight";
  s = LoadWith(o, "extra");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unexpected (1): model.visual.blocks.3.norm1.weight"),
            std::string::npos)
      << s.ToString();
  // A config with one more block than the checkpoint holds.
  VisionConfig deeper = SmallConfig();
  deeper.depth = 4;
  const std::string dir = vision_test::TempDir("deeper");
  ASSERT_TRUE(vision_test::WriteVisionCheckpoint(dir, SmallConfig()).ok());
  const kernels::Context ctx(1, kernels::Precision::kF32);
  EXPECT_EQ(VisionModel::Load(dir, deeper, ctx).status().code(), StatusCode::kNotFound);
}

// make-test-model's checkpoint (real HF layout, BF16) loads through its own config.json.
TEST(VisionModelTest, LoadsTheTestCheckpoint) {
  const std::string dir = vision_test::TempDir("tiny");
  ASSERT_TRUE(WriteTestCheckpoint(dir, TestModelSpec{}, false).ok());
  auto text = LoadQwen3Config(dir);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto cfg = LoadVisionConfig(dir, *text);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ASSERT_TRUE(cfg->has_value());
  for (kernels::Precision p :
       {kernels::Precision::kF32, kernels::Precision::kBF16, kernels::Precision::kInt8}) {
    const kernels::Context ctx(2, p);
    auto m = VisionModel::Load(dir, **cfg, ctx);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_GT((*m)->weight_bytes(), 0u);
    EXPECT_NE((*m)->LayoutText().find("visual.blocks.3.attn.qkv.weight"), std::string::npos);
    const Encoded fast = EncodeWith(**m, {{1, 4, 4}, {1, 2, 6}}, false);
    const Encoded ref = EncodeWith(**m, {{1, 4, 4}, {1, 2, 6}}, true);
    EXPECT_EQ(fast.out.tokens, 7);
    EXPECT_EQ(fast.out.deepstack.size(), 3u * 7 * 64);
    EXPECT_LE(WorstRelErr(fast, ref), p == kernels::Precision::kF32 ? 1e-5 : 0.15);
  }
}

}  // namespace
}  // namespace vls
