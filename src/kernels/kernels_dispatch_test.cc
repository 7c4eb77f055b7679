// Every kernel variant this CPU supports against the scalar reference, on awkward sizes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace vls::kernels {
namespace {

struct Case {
  int64_t M, K, N;
};
// K not a multiple of 16 or 32 (masked tails), N odd (partial register tiles), M covering a
// single decode row, a partial row tile and several tiles plus a remainder.
constexpr Case kCases[] = {{1, 1, 1},    {1, 77, 5},    {3, 130, 33}, {17, 67, 31},
                           {3, 512, 41}, {17, 1000, 7}, {8, 2049, 65}};

using testing::F32Bound;
using testing::Random;

TEST(KernelsDispatchTest, ReferenceIsAlwaysSupportedAndFirst) {
  const auto all = SupportedVariants();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front(), &ReferenceVariant());
  EXPECT_NE(DefaultVariant().name, nullptr);
}

TEST(KernelsDispatchTest, EveryVariantMatchesReferenceMatMulF32) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (const Case& c : kCases) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const std::vector<float> x = Random(size_t(c.M * c.K), 1);
        // Round the weights to the dtype first so the reference sees exactly what is stored.
        HostTensor wt = FromF32As(dt, {c.N, c.K}, Random(size_t(c.N * c.K), 2));
        const Matrix w{dt, wt.data(), c.N, c.K};
        std::vector<float> wf(size_t(c.N * c.K));
        for (int64_t n = 0; n < c.N; ++n) LoadRow(w, n, &wf[size_t(n * c.K)]);
        std::vector<float> ref(size_t(c.M * c.N)), got(size_t(c.M * c.N), -1.0f);
        MatMulTransposed(x.data(), c.M, c.K, w, ref.data());
        // Two calls over a split of N, as the thread pool does.
        const int64_t mid = c.N / 2;
        v->matmul_f32(x.data(), c.M, c.K, w, 0, mid, got.data());
        v->matmul_f32(x.data(), c.M, c.K, w, mid, c.N, got.data());
        for (int64_t m = 0; m < c.M; ++m) {
          for (int64_t n = 0; n < c.N; ++n) {
            const double tol = 2 * F32Bound(&x[size_t(m * c.K)], &wf[size_t(n * c.K)], c.K);
            ASSERT_NEAR(got[size_t(m * c.N + n)], ref[size_t(m * c.N + n)], tol)
                << v->name << " " << DTypeName(dt) << " M=" << c.M << " K=" << c.K << " N=" << c.N
                << " at " << m << "," << n;
          }
        }
      }
    }
  }
}

TEST(KernelsDispatchTest, EveryBf16KernelMatchesReferenceOnRoundedActivations) {
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->matmul_bf16 == nullptr) continue;
    for (const Case& c : kCases) {
      const std::vector<float> x = Random(size_t(c.M * c.K), 3);
      std::vector<uint16_t> xb(x.size());
      std::vector<float> xr(x.size());  // the rounded activations, widened back
      for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = F32ToBf16(x[i]);
        xr[i] = Bf16ToF32(xb[i]);
      }
      HostTensor wt = FromF32As(DType::kBF16, {c.N, c.K}, Random(size_t(c.N * c.K), 4));
      const Matrix w{DType::kBF16, wt.data(), c.N, c.K};
      std::vector<float> wf(size_t(c.N * c.K));
      for (int64_t n = 0; n < c.N; ++n) LoadRow(w, n, &wf[size_t(n * c.K)]);
      std::vector<float> ref(size_t(c.M * c.N)), got(size_t(c.M * c.N), -1.0f);
      MatMulTransposed(xr.data(), c.M, c.K, w, ref.data());
      v->matmul_bf16(xb.data(), c.M, c.K, w, 0, c.N, got.data());
      for (int64_t m = 0; m < c.M; ++m) {
        for (int64_t n = 0; n < c.N; ++n) {
          // Products of two BF16 values are exact in f32, so only the f32 sums differ.
          const double tol = 2 * F32Bound(&xr[size_t(m * c.K)], &wf[size_t(n * c.K)], c.K);
          ASSERT_NEAR(got[size_t(m * c.N + n)], ref[size_t(m * c.N + n)], tol)
              << v->name << " M=" << c.M << " K=" << c.K << " N=" << c.N;
        }
      }
    }
  }
}

TEST(KernelsDispatchTest, Bf16PrecisionStaysWithinBf16RoundingOfF32) {
  // Rounding activations to BF16 (8 significant bits) perturbs each product by at most
  // 2^-9 relative, so |Δy| <= 2^-9 · Σ|x·w| (plus the f32 summation terms).
  for (const KernelVariant* v : SupportedVariants()) {
    const Case c{17, 1000, 31};
    const std::vector<float> x = Random(size_t(c.M * c.K), 5);
    HostTensor wt = FromF32As(DType::kBF16, {c.N, c.K}, Random(size_t(c.N * c.K), 6));
    const Matrix w{DType::kBF16, wt.data(), c.N, c.K};
    std::vector<float> wf(size_t(c.N * c.K));
    for (int64_t n = 0; n < c.N; ++n) LoadRow(w, n, &wf[size_t(n * c.K)]);
    std::vector<float> ref(size_t(c.M * c.N)), got(size_t(c.M * c.N));
    MatMulTransposed(x.data(), c.M, c.K, w, ref.data());
    Context ctx(2, Precision::kBF16, v);
    ctx.MatMul(x.data(), c.M, c.K, w, got.data());
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) {
        double abs_sum = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          abs_sum += std::fabs(double(x[size_t(m * c.K + k)]) * wf[size_t(n * c.K + k)]);
        }
        ASSERT_NEAR(got[size_t(m * c.N + n)], ref[size_t(m * c.N + n)], abs_sum / 512 * 1.01)
            << v->name;
      }
    }
  }
}

// Batched decode and speculative verification give each row what it would get alone, bit for
// bit (docs/speculative.md): a row's dense product must not depend on M or the tile it lands in.
TEST(KernelsDispatchTest, EveryDenseKernelsRowResultDoesNotDependOnM) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Case c{17, 1001, 37};
      const std::vector<float> x = Random(size_t(c.M * c.K), 9);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = F32ToBf16(x[i]);
      HostTensor wt = FromF32As(dt, {c.N, c.K}, Random(size_t(c.N * c.K), 10));
      const Matrix w{dt, wt.data(), c.N, c.K};
      const bool bf16 = dt == DType::kBF16 && v->matmul_bf16 != nullptr;
      std::vector<float> all(size_t(c.M * c.N)), one(size_t(c.N));
      v->matmul_f32(x.data(), c.M, c.K, w, 0, c.N, all.data());
      std::vector<float> all_bf16(all.size());
      if (bf16) v->matmul_bf16(xb.data(), c.M, c.K, w, 0, c.N, all_bf16.data());
      for (int64_t m = 0; m < c.M; ++m) {
        v->matmul_f32(&x[size_t(m * c.K)], 1, c.K, w, 0, c.N, one.data());
        for (int64_t n = 0; n < c.N; ++n) {
          ASSERT_EQ(one[size_t(n)], all[size_t(m * c.N + n)])
              << v->name << " f32 " << DTypeName(dt) << " " << m << "," << n;
        }
        if (!bf16) continue;
        v->matmul_bf16(&xb[size_t(m * c.K)], 1, c.K, w, 0, c.N, one.data());
        for (int64_t n = 0; n < c.N; ++n) {
          ASSERT_EQ(one[size_t(n)], all_bf16[size_t(m * c.N + n)])
              << v->name << " bf16 " << m << "," << n;
        }
      }
    }
  }
}

TEST(KernelsDispatchTest, ContextMatMulSplitsOverThreadsLikeOneCall) {
  for (const KernelVariant* v : SupportedVariants()) {
    const Case c{5, 300, 257};
    const std::vector<float> x = Random(size_t(c.M * c.K), 7);
    HostTensor wt = FromF32As(DType::kBF16, {c.N, c.K}, Random(size_t(c.N * c.K), 8));
    const Matrix w{DType::kBF16, wt.data(), c.N, c.K};
    std::vector<float> one(size_t(c.M * c.N)), many(size_t(c.M * c.N));
    v->matmul_f32(x.data(), c.M, c.K, w, 0, c.N, one.data());
    Context ctx(3, Precision::kF32, v);
    ctx.MatMul(x.data(), c.M, c.K, w, many.data());
    EXPECT_EQ(one, many) << v->name;  // same tiles, same order: bit-identical
  }
}

TEST(KernelsDispatchTest, EveryVariantAttentionHelpersMatchReference) {
  // D = 128 (the real head size), 200 (a partial second register block), 5, 17 and 33 (masked
  // tails after no, no and one whole 32-value step of the scores' dot product).
  for (const KernelVariant* v : SupportedVariants()) {
    for (int64_t D : {5, 17, 33, 128, 200}) {
      const int64_t T = 37, stride = D + 3;
      const std::vector<float> q = Random(size_t(D), 11), kv = Random(size_t(T * stride), 12);
      std::vector<float> s_ref(static_cast<size_t>(T)), s_got(static_cast<size_t>(T));
      ReferenceVariant().scores(q.data(), kv.data(), stride, T, D, 0.125f, s_ref.data());
      v->scores(q.data(), kv.data(), stride, T, D, 0.125f, s_got.data());
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_NEAR(s_got[size_t(t)], s_ref[size_t(t)],
                    0.125 * 2 * F32Bound(q.data(), &kv[size_t(t * stride)], D))
            << v->name;
      }
      std::vector<float> o_ref(static_cast<size_t>(D)), o_got(static_cast<size_t>(D), 99.0f);
      ReferenceVariant().weighted_sum(s_ref.data(), kv.data(), stride, T, D, o_ref.data());
      v->weighted_sum(s_ref.data(), kv.data(), stride, T, D, o_got.data());
      for (int64_t d = 0; d < D; ++d) {
        double abs_sum = 0;
        for (int64_t t = 0; t < T; ++t) {
          abs_sum += std::fabs(double(s_ref[size_t(t)]) * kv[size_t(t * stride + d)]);
        }
        EXPECT_NEAR(o_got[size_t(d)], o_ref[size_t(d)], 2 * T * 1.2e-7 * abs_sum) << v->name;
      }
    }
  }
}

TEST(KernelsDispatchTest, EveryVariantRmsNormAndSiluMulMatchReference) {
  // RmsNorm: the sum of squares in another order (relative error of a positive sum of n terms
  // is at most about n·2^-24; these n give < 1e-4, the inverse square root halves it) and two
  // roundings per output. 2e-6 relative is 16 ulps, far above what the orders differ by and
  // far below a wrong element or a missed tail (errors of order 1).
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->rms_norm == nullptr) continue;
    for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 128, 1024, 1031}) {
      const int64_t M = 3;
      const std::vector<float> x = Random(size_t(M * n), 21), w = Random(size_t(n), 22);
      std::vector<float> want(x.size()), got(x.size(), 99.0f);
      RmsNorm(x.data(), M, n, w.data(), 1e-6f, want.data());
      v->rms_norm(x.data(), M, n, w.data(), 1e-6f, got.data());
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-30) << v->name << " n=" << n;
      }
    }
  }
  // SiLU·up: the polynomial exp is within about 2 ulps of std::exp; one division and one
  // product add two roundings. Inputs span the range where exp(-g) under- and overflows
  // (g = ±100), zeros and a masked tail.
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->silu_mul == nullptr) continue;
    for (int64_t n : {1, 15, 16, 17, 3072, 3077}) {
      std::vector<float> g = Random(size_t(n), 23), up = Random(size_t(n), 24);
      for (size_t i = 0; i < g.size(); ++i) g[i] *= 6.0f;
      const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, 88.0f, -88.0f, 1e-30f, -20.0f};
      for (size_t i = 0; i < g.size() && i < std::size(specials); ++i) g[i] = specials[i];
      std::vector<float> want = g, got = g;
      SiluMul(want.data(), up.data(), n);
      v->silu_mul(got.data(), up.data(), n);
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-37)
            << v->name << " n=" << n << " g=" << g[i];
      }
    }
  }
}

TEST(KernelsDispatchTest, EveryVariantWeightedRowsIsTheReferenceBitForBit) {
  // One fused multiply-add per row in order: every variant's lanes compute exactly that. Zeros
  // of both signs (0 · -x from +0 stays +0), tails of every length, 1 to 9 rows.
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->weighted_rows == nullptr) continue;
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 100, 2048}) {
      for (int64_t k : {1, 2, 8, 9}) {
        std::vector<std::vector<float>> rows;
        std::vector<const float*> ptrs;
        for (int64_t j = 0; j < k; ++j) {
          rows.push_back(Random(size_t(n), uint32_t(31 + j)));
          rows.back()[0] = j % 2 == 0 ? -0.0f : 0.0f;
        }
        for (const auto& r : rows) ptrs.push_back(r.data());
        std::vector<float> w = Random(size_t(k), 41);
        w[0] = 0.0f;
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 1, 99.0f);
        WeightedRows(w.data(), ptrs.data(), k, n, want.data());
        v->weighted_rows(w.data(), ptrs.data(), k, n, got.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(i)]),
                    std::bit_cast<uint32_t>(want[size_t(i)]))
              << v->name << " n=" << n << " k=" << k << " i=" << i;
        }
        EXPECT_EQ(got[size_t(n)], 99.0f) << v->name << ": wrote past n=" << n;
      }
    }
  }
}

TEST(KernelsDispatchTest, EveryVariantToBf16IsF32ToBf16BitForBit) {
  // Ties to even both ways, carries into the exponent, the largest finite values rounding to
  // infinity, infinities, quiet and signalling NaNs of both signs, denormals and zeros.
  std::vector<float> x = Random(1000, 25);
  for (const uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
        0xff800000u, 0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x00000001u, 0x807fffffu,
        0x00008000u, 0x00000000u, 0x80000000u}) {
    x.push_back(std::bit_cast<float>(bits));
  }
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->to_bf16 == nullptr) continue;
    for (const size_t n : {x.size(), size_t{1}, size_t{17}}) {
      const size_t from = x.size() - n;
      std::vector<uint16_t> got(n + 1, 0xabcd);
      v->to_bf16(x.data() + from, static_cast<int64_t>(n), got.data());
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(got[i], F32ToBf16(x[from + i]))
            << v->name << " x=" << std::bit_cast<uint32_t>(x[from + i]);
      }
      EXPECT_EQ(got[n], 0xabcd) << v->name << ": wrote past n=" << n;
    }
  }
  std::vector<uint16_t> dispatched(x.size());
  ToBf16(x.data(), static_cast<int64_t>(x.size()), dispatched.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dispatched[i], F32ToBf16(x[i]));
}

TEST(KernelsDispatchTest, EveryVariantApplyRopeMatchesReference) {
  // Each output is a·c ∓ b·s: the fused multiply-add rounds once where the reference rounds
  // twice, a difference of at most one rounding of |a·c| + |b·s|.
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->apply_rope == nullptr) continue;
    for (int64_t D : {2, 30, 32, 34, 64, 128, 130}) {
      const std::vector<float> x = Random(size_t(D), 26), c = Random(size_t(D / 2), 27),
                               sn = Random(size_t(D / 2), 28);
      std::vector<float> want = x, got = x;
      ApplyRope(want.data(), c.data(), sn.data(), D);
      v->apply_rope(got.data(), c.data(), sn.data(), D);
      for (int64_t i = 0; i < D; ++i) {
        const size_t j = size_t(i % (D / 2));
        const double scale = std::fabs(x[j] * c[j]) + std::fabs(x[j + size_t(D / 2)] * sn[j]) +
                             std::fabs(x[j + size_t(D / 2)] * c[j]) + std::fabs(x[j] * sn[j]);
        EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 2.5e-7 * scale) << v->name << " D=" << D;
      }
    }
  }
}

}  // namespace
}  // namespace vls::kernels
