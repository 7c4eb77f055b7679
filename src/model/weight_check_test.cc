// The finite-weight check (ModelOptions::check_weights): the scan itself, and loads that refuse
// a checkpoint with one NaN or infinite weight naming the tensor and the element, whichever
// precision prepares it, while the same checkpoint loads when the check is off.
#include "model/weight_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/scratch_test_util.h"
#include "model/qwen3_model.h"
#include "model/test_checkpoint.h"

namespace vls {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// `n` finite values of every kind (zero, negative zero, subnormal, the largest finite) in `dt`.
std::vector<uint8_t> Finite(DType dt, int64_t n) {
  const float kinds[] = {0.0f, -0.0f, 1e-40f, 1.5f, -3.0f, 65504.0f, 1e30f};
  std::vector<uint8_t> out(static_cast<size_t>(n) * DTypeSize(dt));
  for (int64_t i = 0; i < n; ++i) {
    float f = kinds[i % 7];
    if (dt == DType::kF16 && std::fabs(f) > 65504.0f) f = 2.0f;  // F16's largest is 65504
    if (dt == DType::kF32) {
      std::memcpy(&out[static_cast<size_t>(i) * 4], &f, 4);
    } else {
      const uint16_t h = dt == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
      std::memcpy(&out[static_cast<size_t>(i) * 2], &h, 2);
    }
  }
  return out;
}

void Put(DType dt, std::vector<uint8_t>* v, int64_t i, float f) {
  if (dt == DType::kF32) {
    std::memcpy(&(*v)[static_cast<size_t>(i) * 4], &f, 4);
  } else {
    const uint16_t h = dt == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
    std::memcpy(&(*v)[static_cast<size_t>(i) * 2], &h, 2);
  }
}

TEST(WeightCheckTest, FindsTheFirstNaNOrInfinityInEveryFloatDType) {
  for (const DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const int64_t n : {int64_t{1}, int64_t{1023}, int64_t{1024}, int64_t{5000}}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + " n=" + std::to_string(n));
      std::vector<uint8_t> v = Finite(dt, n);
      EXPECT_FALSE(FindNonFinite(dt, v.data(), n).has_value());
      // In a full block, in the tail, at the ends; the first of two is reported.
      for (const int64_t at : {int64_t{0}, n / 2, n - 1}) {
        for (const float bad : {kNaN, -kNaN, kInf, -kInf}) {
          std::vector<uint8_t> w = v;
          Put(dt, &w, at, bad);
          if (at + 1 < n) Put(dt, &w, n - 1, kNaN);
          const auto found = FindNonFinite(dt, w.data(), n);
          ASSERT_TRUE(found.has_value()) << at;
          EXPECT_EQ(found->index, at);
          EXPECT_EQ(found->nan, std::isnan(bad));
        }
      }
    }
  }
  const std::vector<int32_t> ints = {-1, 0x7F800000, 0x7FC00000};
  EXPECT_FALSE(FindNonFinite(DType::kI32, ints.data(), 3).has_value());
}

TEST(WeightCheckTest, TheErrorNamesTheTensorAndTheElement) {
  const Status s = NonFiniteWeightError("model.layers.3.mlp.down_proj.weight", {1234, true}, 100);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor 'model.layers.3.mlp.down_proj.weight' has a NaN at element "
                             "1234 (row 12, column 34)"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(
      NonFiniteWeightError("n", {5, false}, 0).message().find("has an infinity at element 5;"),
      std::string::npos);
}

ModelOptions Options(kernels::Precision p, bool check) {
  ModelOptions o;
  o.threads = 2;
  o.precision = p;
  o.check_weights = check;
  return o;
}

// A tiny checkpoint (untied, so the embedding is checked on its own) with `value` written at
// element `index` of `tensor` (none when `tensor` is empty).
std::string Checkpoint(const std::string& name, DType dtype, const std::string& tensor,
                       int64_t index, float value) {
  const std::string dir = test::ScratchPath("vls_weight_check_test_", name);
  TestModelSpec spec;
  spec.dtype = dtype;
  spec.tied = false;
  spec.vision = false;
  EXPECT_TRUE(WriteTestCheckpoint(dir, spec, false).ok());
  if (!tensor.empty()) {
    const Status s = SetTestCheckpointElement(dir, tensor, index, value);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return dir;
}

const std::string kP = "model.language_model.";

TEST(WeightCheckTest, ALoadThatChecksRefusesANonFiniteWeightNamingIt) {
  struct Case {
    std::string tensor;
    int64_t index;
    float value;
    std::string want;
  };
  const std::vector<Case> cases = {
      {kP + "layers.1.mlp.down_proj.weight", 1234, kNaN,
       "tensor '" + kP +
           "layers.1.mlp.down_proj.weight' has a NaN at element 1234 (row 9, "
           "column 82)"},
      {kP + "layers.2.self_attn.k_proj.weight", 70, -kInf, "k_proj.weight' has an infinity at "},
      {"lm_head.weight", 511 * 64 + 63, kInf, "'lm_head.weight' has an infinity at element 32767"},
      {kP + "embed_tokens.weight", 300 * 64 + 1, kNaN, "'" + kP + "embed_tokens.weight' has a NaN"},
      {kP + "layers.0.post_attention_layernorm.weight", 3, kNaN,
       "post_attention_layernorm.weight' has a NaN at element 3"},
      {kP + "norm.weight", 63, kInf, "'" + kP + "norm.weight' has an infinity at element 63"},
  };
  int n = 0;
  for (const DType dt : {DType::kBF16, DType::kF32}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.tensor + " " + std::string(DTypeName(dt)));
      const std::string dir =
          Checkpoint("bad" + std::to_string(n++), dt, c.tensor, c.index, c.value);
      for (const auto p :
           {kernels::Precision::kF32, kernels::Precision::kBF16, kernels::Precision::kInt8}) {
        auto m = Qwen3Model::Load(dir, Options(p, true));
        ASSERT_FALSE(m.ok());
        EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
        EXPECT_NE(m.status().message().find(c.want), std::string::npos) << m.status().ToString();
      }
      EXPECT_TRUE(Qwen3Model::Load(dir, Options(kernels::Precision::kBF16, false)).ok());
    }
  }
  const std::string good = Checkpoint("good", DType::kBF16, "", 0, 0);
  auto m = Qwen3Model::Load(good, Options(kernels::Precision::kBF16, true));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
}

}  // namespace
}  // namespace vls
