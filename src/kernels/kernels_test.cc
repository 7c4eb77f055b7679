#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/tensor.h"

namespace vls::kernels {
namespace {

TEST(KernelsTest, MatMulTransposedMatchesDoubleLoopForEveryWeightDtype) {
  const int64_t M = 3, K = 5, N = 4;
  std::vector<float> x(M * K), w(N * K);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor wt = FromF32As(dt, {N, K}, w);  // these values are exact in every dtype
    std::vector<float> y(M * N);
    MatMulTransposed(x.data(), M, K, {dt, wt.data(), N, K}, y.data());
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k) ref += double(x[m * K + k]) * w[n * K + k];
        EXPECT_NEAR(y[m * N + n], ref, 1e-6) << DTypeName(dt);
      }
    }
  }
}

TEST(KernelsTest, RmsNormNormalisesThenScales) {
  const float x[4] = {1, 2, 3, 4};
  const float w[4] = {1, 0.5f, 2, 1};
  float out[4];
  RmsNorm(x, 1, 4, w, 0.0f, out);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0);
  EXPECT_NEAR(out[0], 1 / rms, 1e-6);
  EXPECT_NEAR(out[1], 2 / rms * 0.5, 1e-6);
  EXPECT_NEAR(out[2], 3 / rms * 2, 1e-6);
}

TEST(KernelsTest, RopeRotatesHalvesNotPairs) {
  // D = 4: pairs are (0,2) and (1,3) (rotate_half), not (0,1).
  float x[4] = {1, 0, 0, 0};
  const float c[2] = {0, 1}, s[2] = {1, 0};  // 90 degrees on slot 0, identity on slot 1
  ApplyRope(x, c, s, 4);
  EXPECT_FLOAT_EQ(x[0], 0);
  EXPECT_FLOAT_EQ(x[2], 1);
  EXPECT_FLOAT_EQ(x[1], 0);
}

TEST(KernelsTest, SoftmaxIsStableForLargeInputs) {
  float x[3] = {1000, 1000, -1e30f};
  Softmax(x, 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[2], 0.0f);
}

TEST(KernelsTest, SiluMul) {
  float g[2] = {0, 1};
  const float u[2] = {3, 2};
  SiluMul(g, u, 2);
  EXPECT_FLOAT_EQ(g[0], 0);
  EXPECT_NEAR(g[1], 2 / (1 + std::exp(-1.0)), 1e-6);
}

}  // namespace
}  // namespace vls::kernels
