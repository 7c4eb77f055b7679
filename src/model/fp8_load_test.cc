// Loading FP8 block-quantized checkpoints (make-test-model --fp8's layout, model/fp8_weights.h):
// the model computes bit for bit what the same weights dequantized into an F32 checkpoint
// compute, at every precision, and every corrupt or mismatched checkpoint is refused naming the
// tensor or the key.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "model/fp8_test_util.h"
#include "model/qwen3_model.h"
#include "model/test_checkpoint.h"

namespace vls {
namespace {

using fp8_test::Json;
using fp8_test::Tensors;

// A tiny untied Qwen3 with every Linear in FP8 (lm_head too) in 48 x 40 blocks: hidden 96 and
// intermediate 200 leave edge blocks of 48 x 16 and 8 x 40 (written once per process).
const std::string& Fp8Model() {
  static const std::string dir = [] {
    const std::string d = fp8_test::Scratch("fp8");
    TestModelSpec spec;
    spec.arch = "qwen3";
    spec.vision = false;
    spec.deepstack = 0;
    spec.hidden = 96;
    spec.intermediate = 200;
    spec.layers = 2;
    spec.vocab = 301;
    spec.tied = false;
    spec.seed = 5;
    spec.fp8 = true;
    spec.fp8_block_rows = 48;
    spec.fp8_block_cols = 40;
    spec.fp8_lm_head = true;
    EXPECT_TRUE(WriteTestCheckpoint(d, spec, false).ok());
    return d;
  }();
  return dir;
}

std::string Variant(const std::string& tag, const std::function<void(Tensors&)>& tensors,
                    const std::function<void(Json&)>& config = nullptr) {
  return fp8_test::Variant(Fp8Model(), tag, tensors, config);
}

std::string Dequantized(DType dtype) { return fp8_test::Dequantized(Fp8Model(), dtype); }

ModelOptions Options(kernels::Precision p) {
  ModelOptions o;
  o.threads = 2;
  o.precision = p;
  return o;
}

// The logits of the last row of a fixed prompt.
std::vector<float> LastLogits(const Qwen3Model& m) {
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 250, 3};
  const int64_t S = static_cast<int64_t>(prompt.size()), H = m.config().hidden;
  auto cache = m.NewCache(static_cast<int>(S)).value();
  std::vector<ForwardRow> rows;
  for (int p = 0; p < S; ++p) rows.push_back({cache.get(), p, {p, p, p}});
  std::vector<float> x(static_cast<size_t>(S * H)), h(static_cast<size_t>(H)),
      logits(static_cast<size_t>(m.config().vocab));
  m.Embed(prompt, x.data());
  m.RunLayers(x.data(), rows, nullptr);
  m.FinalNorm(x.data() + (S - 1) * H, 1, h.data());
  m.Logits(h.data(), 1, logits.data());
  return logits;
}

TEST(Fp8LoadTest, ComputesExactlyWhatTheDequantizedCheckpointComputes) {
  const std::string f32 = Dequantized(DType::kF32), bf16 = Dequantized(DType::kBF16);
  for (kernels::Precision p :
       {kernels::Precision::kF32, kernels::Precision::kBF16, kernels::Precision::kInt8}) {
    auto fp8 = Qwen3Model::Load(Fp8Model(), Options(p));
    ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
    auto ref = Qwen3Model::Load(f32, Options(p));
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    EXPECT_EQ((*fp8)->prepared().LayoutText(), (*ref)->prepared().LayoutText());
    const std::vector<float> a = LastLogits(**fp8), b = LastLogits(**ref);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
        << "precision " << kernels::PrecisionName(p);
    // The prepared matrices hold the same bytes.
    ASSERT_EQ((*fp8)->prepared().size(), (*ref)->prepared().size());
    EXPECT_EQ(std::memcmp((*fp8)->prepared().data(), (*ref)->prepared().data(),
                          (*fp8)->prepared().size()),
              0);
    if (p == kernels::Precision::kF32) {
      // Dequantized to F32 (exact), not to the checkpoint's BF16.
      for (const PreparedEntry& e : (*fp8)->prepared().entries()) EXPECT_EQ(e.dtype, DType::kF32);
    }
    if (p == kernels::Precision::kBF16) {
      // At bf16 the product is rounded once, to nearest even: a BF16 checkpoint of the same
      // rounded weights gives the same model.
      auto ref16 = Qwen3Model::Load(bf16, Options(p));
      ASSERT_TRUE(ref16.ok()) << ref16.status().ToString();
      const std::vector<float> c = LastLogits(**ref16);
      EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0);
    }
  }
}

void ExpectLoadError(const std::string& dir, StatusCode code,
                     const std::vector<std::string>& needles) {
  auto m = Qwen3Model::Load(dir, Options(kernels::Precision::kBF16));
  ASSERT_FALSE(m.ok()) << dir;
  EXPECT_EQ(m.status().code(), code) << m.status().ToString();
  for (const std::string& n : needles) {
    EXPECT_NE(m.status().message().find(n), std::string::npos)
        << n << " in " << m.status().ToString();
  }
}

const std::string kUp = "model.layers.1.mlp.up_proj.weight";

TEST(Fp8LoadTest, RefusesCorruptTensorsNamingThem) {
  ExpectLoadError(
      Variant("nan_code", [](Tensors& t) { t.at(kUp).data()[5 * 96 + 7] = std::byte{0x7F}; }),
      StatusCode::kDataLoss, {"'" + kUp + "'", "NaN code at [5, 7]"});
  ExpectLoadError(Variant("no_scale", [](Tensors& t) { t.erase(kUp + "_scale_inv"); }),
                  StatusCode::kInvalidArgument, {"'" + kUp + "_scale_inv' are missing"});
  ExpectLoadError(
      Variant(
          "scale_shape",
          [](Tensors& t) {
            t[kUp + "_scale_inv"] = FromF32As(DType::kBF16, {5, 2}, std::vector<float>(10, 1.0f));
          }),
      StatusCode::kInvalidArgument, {"has shape [5,2]", "needs [5,3]"});
  ExpectLoadError(Variant("scale_nan",
                          [](Tensors& t) {
                            HostTensor& s = t.at(kUp + "_scale_inv");
                            std::vector<float> v = ToF32Vector(s.view());
                            v[4] = INFINITY;
                            s = FromF32As(DType::kBF16, s.shape(), v);
                          }),
                  StatusCode::kInvalidArgument, {"'" + kUp + "_scale_inv' block [1, 1] holds inf"});
  // A scale tensor beside a float weight, and an FP8 tensor where no Linear weight is.
  ExpectLoadError(Variant("stray_scale",
                          [](Tensors& t) {
                            t["model.norm.weight_scale_inv"] =
                                FromF32As(DType::kBF16, {1, 1}, std::vector<float>{1});
                          }),
                  StatusCode::kInvalidArgument,
                  {"unexpected tensors", "model.norm.weight_scale_inv"});
  ExpectLoadError(Variant("fp8_embed",
                          [](Tensors& t) {
                            HostTensor& e = t.at("model.embed_tokens.weight");
                            e = FromF32As(DType::kF8E4M3, e.shape(), ToF32Vector(e.view()));
                          }),
                  StatusCode::kInvalidArgument,
                  {"'model.embed_tokens.weight' has dtype F8_E4M3", "only Linear weights"});
  // A BF16 weight with scales beside it: the scales would be ignored.
  ExpectLoadError(Variant("bf16_with_scale",
                          [](Tensors& t) {
                            t.at(kUp) = FromF32As(DType::kBF16, t.at(kUp).shape(),
                                                  ToF32Vector(t.at(kUp).view()));
                          }),
                  StatusCode::kInvalidArgument, {"'" + kUp + "_scale_inv' is given but"});
}

TEST(Fp8LoadTest, RefusesTensorsTheConfigContradicts) {
  ExpectLoadError(
      Variant("no_quant_config", nullptr, [](Json& c) { c.erase("quantization_config"); }),
      StatusCode::kInvalidArgument, {"declares no quantization_config"});
  ExpectLoadError(
      Variant("excluded", nullptr,
              [](Json& c) { c["quantization_config"]["modules_to_not_convert"] = {"mlp.up"}; }),
      StatusCode::kInvalidArgument, {"'" + kUp + "'", "modules_to_not_convert lists its module"});
  ExpectLoadError(Variant("block", nullptr,
                          [](Json& c) {
                            c["quantization_config"]["weight_block_size"] = {128, 128};
                          }),
                  StatusCode::kInvalidArgument, {"in blocks of 128x128"});
  ExpectLoadError(
      Variant("awq", nullptr, [](Json& c) { c["quantization_config"]["quant_method"] = "awq"; }),
      StatusCode::kUnimplemented, {"quant_method: \"awq\" is not supported"});
  // A model whose weights are all float still loads under an FP8 config (partly quantized).
  auto plain = Qwen3Model::Load(
      Variant("all_float", [](Tensors& t) { t = fp8_test::ReadAll(Dequantized(DType::kBF16)); }),
      Options(kernels::Precision::kF32));
  EXPECT_TRUE(plain.ok()) << plain.status().ToString();
}

}  // namespace
}  // namespace vls
