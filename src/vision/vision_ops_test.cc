// The vision tower's AVX-512 row loops against their scalar forms (vision_ops.h,
// vision_attention.h), and the BF16 GEMM attention against the f32 path.
#include "vision/vision_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "tensor/dtype.h"
#include "vision/vision_attention.h"

namespace vls::vision_internal {
namespace {

bool HaveAvx512() { return kernels::IsAvx512Variant(kernels::DefaultVariant()); }

std::vector<float> Random(size_t n, uint32_t seed, float scale, float offset = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(offset, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Row lengths with and without a 16-lane tail.
constexpr int64_t kLengths[] = {1, 7, 16, 24, 1024, 1037, 4096};

TEST(VisionOpsTest, LayerNormAvx512MatchesScalar) {
  if (!HaveAvx512()) GTEST_SKIP() << "no AVX-512";
  for (const int64_t n : kLengths) {
    // An offset mean makes the centred pass matter.
    const std::vector<float> x = Random(static_cast<size_t>(n), 1, 3.0f, 20.0f);
    const std::vector<float> w = Random(static_cast<size_t>(n), 2, 1.0f);
    const std::vector<float> b = Random(static_cast<size_t>(n), 3, 1.0f);
    std::vector<float> ref(static_cast<size_t>(n)), fast(static_cast<size_t>(n));
    LayerNormRow(x.data(), n, w.data(), b.data(), 1e-6f, ref.data());
    LayerNormRowAvx512(x.data(), n, w.data(), b.data(), 1e-6f, fast.data());
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(fast[static_cast<size_t>(i)], ref[static_cast<size_t>(i)],
                  2e-6 * (1 + std::fabs(ref[static_cast<size_t>(i)])))
          << "n " << n << " i " << i;
    }
  }
}

TEST(VisionOpsTest, AddRowsAvx512MatchesScalar) {
  if (!HaveAvx512()) GTEST_SKIP() << "no AVX-512";
  for (const int64_t n : kLengths) {
    const std::vector<float> x = Random(static_cast<size_t>(n), 4, 1.0f);
    const std::vector<float> y = Random(static_cast<size_t>(n), 5, 1.0f);
    const std::vector<float> b = Random(static_cast<size_t>(n), 6, 1.0f);
    std::vector<float> with_y = x, bias_only = x;
    AddRowsAvx512(with_y.data(), y.data(), b.data(), n);
    AddRowsAvx512(bias_only.data(), nullptr, b.data(), n);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(with_y[i], x[i] + b[i] + y[i]);
      EXPECT_EQ(bias_only[i], x[i] + b[i]);
    }
  }
}

TEST(VisionOpsTest, FusedResidualLayerNormEqualsTheTwoSteps) {
  ThreadPool pool(2);
  const int64_t M = 37, n = 96;
  const std::vector<float> x0 = Random(static_cast<size_t>(M * n), 7, 2.0f);
  const std::vector<float> y = Random(static_cast<size_t>(M * n), 8, 2.0f);
  const std::vector<float> b = Random(static_cast<size_t>(n), 9, 1.0f);
  const std::vector<float> w = Random(static_cast<size_t>(n), 10, 1.0f);
  const std::vector<float> b2 = Random(static_cast<size_t>(n), 11, 1.0f);
  for (const bool avx512 : {false, HaveAvx512()}) {
    std::vector<float> xa = x0, xb = x0, oa(x0.size()), ob(x0.size());
    AddBiasResidual(xa.data(), y.data(), M, n, b.data(), pool, avx512);
    LayerNormRows(xa.data(), M, n, w.data(), b2.data(), 1e-6f, oa.data(), pool, avx512);
    AddBiasResidualLayerNorm(xb.data(), y.data(), M, n, b.data(), w.data(), b2.data(), 1e-6f,
                             ob.data(), pool, avx512);
    EXPECT_EQ(xa, xb);
    EXPECT_EQ(oa, ob);
  }
}

TEST(VisionOpsTest, SoftmaxRowAvx512MatchesScalar) {
  if (!HaveAvx512()) GTEST_SKIP() << "no AVX-512";
  for (const int64_t n : kLengths) {
    std::vector<float> s = Random(static_cast<size_t>(n), 12, 6.0f);
    if (n > 3) s[2] = -1e30f;  // underflows to 0
    std::vector<uint16_t> ref(static_cast<size_t>(n)), fast(static_cast<size_t>(n));
    const float mr = RowMax(s.data(), n), mf = RowMaxAvx512(s.data(), n);
    EXPECT_EQ(mr, mf) << n;
    const float sr = ExpRowToBf16(s.data(), n, 0.125f, mr, ref.data());
    const float sf = ExpRowToBf16Avx512(s.data(), n, 0.125f, mr, fast.data());
    EXPECT_NEAR(sf, sr, 1e-5 * sr) << n;
    for (size_t i = 0; i < ref.size(); ++i) {
      const float r = Bf16ToF32(ref[i]), f = Bf16ToF32(fast[i]);
      // Within one BF16 step (the exp arguments round differently).
      EXPECT_LE(std::fabs(f - r), std::ldexp(std::fabs(r), -7) + 1e-38f) << n << " " << i;
    }
    EXPECT_GE(sr, 1.0f);  // the max contributes exp(0) = 1
  }
}

// The AVX-512 packing (bias, rotary, BF16 rounding, V transposed per segment) against the
// scalar one of the reference variant.
TEST(VisionOpsTest, PackHeadsAvx512MatchesScalar) {
  if (!HaveAvx512()) GTEST_SKIP() << "no AVX-512";
  const kernels::Context fast(2, kernels::Precision::kBF16);
  const kernels::Context ref(2, kernels::Precision::kBF16, &kernels::ReferenceVariant());
  for (const int64_t hd : {8, 24, 64}) {
    const int64_t heads = 2, Dv = heads * hd;
    const std::vector<int64_t> segments = {0, 12, 12 + 20};
    const int64_t np = segments.back();
    const std::vector<float> qkv = Random(static_cast<size_t>(np * 3 * Dv), 15, 1.0f);
    const std::vector<float> bias = Random(static_cast<size_t>(3 * Dv), 16, 0.5f);
    const std::vector<float> angle = Random(static_cast<size_t>(np * hd / 2), 17, 2.0f);
    std::vector<float> cos(angle.size()), sin(angle.size());
    for (size_t i = 0; i < angle.size(); ++i) {
      cos[i] = std::cos(angle[i]);
      sin[i] = std::sin(angle[i]);
    }
    std::vector<uint16_t> buf[2][3];
    for (int which = 0; which < 2; ++which) {
      for (auto& b : buf[which]) b.assign(static_cast<size_t>(np * Dv), 0);
      const HeadsBf16 hb{
          .q = buf[which][0].data(), .k = buf[which][1].data(), .vt = buf[which][2].data()};
      PackHeadsBf16(qkv.data(), bias.data(), cos.data(), sin.data(), np, heads, hd, segments, hb,
                    which == 0 ? fast : ref);
    }
    for (int t = 0; t < 3; ++t) {
      for (size_t i = 0; i < buf[0][t].size(); ++i) {
        const float f = Bf16ToF32(buf[0][t][i]), r = Bf16ToF32(buf[1][t][i]);
        EXPECT_LE(std::fabs(f - r), std::ldexp(std::fabs(r), -7) + 1e-30f)
            << "hd " << hd << " tensor " << t << " i " << i;
      }
    }
  }
}

// The BF16 GEMM attention against a double-precision softmax attention over two segments.
TEST(VisionOpsTest, GemmAttentionMatchesDoubleAttention) {
  const kernels::Context ctx(2, kernels::Precision::kBF16);
  if (!GemmAttentionAvailable(ctx)) GTEST_SKIP() << "no oneDNN BF16 / AVX-512";
  const int64_t heads = 3, hd = 16, Dv = heads * hd;
  // 301 rows: 3 row blocks; 2100 rows: 17 row blocks, 3 key blocks of 700.
  const std::vector<int64_t> segments = {0, 150, 150 + 301, 150 + 301 + 2100};
  const int64_t np = segments.back();
  const std::vector<float> qkv = Random(static_cast<size_t>(np * 3 * Dv), 13, 1.0f);
  const std::vector<float> bias = Random(static_cast<size_t>(3 * Dv), 14, 0.5f);
  // Identity rotation: cos 1, sin 0.
  const std::vector<float> cos(static_cast<size_t>(np * hd / 2), 1.0f);
  const std::vector<float> sin(static_cast<size_t>(np * hd / 2), 0.0f);
  std::vector<uint16_t> q(static_cast<size_t>(np * Dv)), k(q.size()), vt(q.size());
  const HeadsBf16 hb{.q = q.data(), .k = k.data(), .vt = vt.data()};
  PackHeadsBf16(qkv.data(), bias.data(), cos.data(), sin.data(), np, heads, hd, segments, hb, ctx);
  std::vector<float> out(static_cast<size_t>(np * Dv));
  const float scale = 0.25f;
  ASSERT_TRUE(GemmAttention(hb, np, heads, hd, segments, scale, out.data(), ctx).ok());
  const auto at = [&](int64_t r, int64_t part, int64_t h, int64_t d) {
    const auto i = static_cast<size_t>(part * Dv + h * hd + d);
    return static_cast<double>(qkv[static_cast<size_t>(r * 3 * Dv) + i] + bias[i]);
  };
  double err = 0, norm = 0;
  for (size_t s = 0; s + 1 < segments.size(); ++s) {
    for (int64_t r = segments[s]; r < segments[s + 1]; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> p;
        double mx = -1e300;
        for (int64_t t = segments[s]; t < segments[s + 1]; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += at(r, 0, h, d) * at(t, 1, h, d);
          p.push_back(scale * dot);
          mx = std::max(mx, p.back());
        }
        double sum = 0;
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0;
          for (size_t t = 0; t < p.size(); ++t)
            o += p[t] * at(segments[s] + static_cast<int64_t>(t), 2, h, d);
          o /= sum;
          const double e = out[static_cast<size_t>(r * Dv + h * hd + d)] - o;
          err += e * e;
          norm += o * o;
        }
      }
    }
  }
  EXPECT_LE(std::sqrt(err / norm), 1e-2);  // BF16 operands and probabilities
}

}  // namespace
}  // namespace vls::vision_internal
