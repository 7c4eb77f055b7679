// oneDNN BF16 matmuls (plain and packed weights, and routed through Context::MatMul) against
// the scalar reference on the same BF16-rounded inputs, on awkward shapes.
#include "kernels/onednn_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "tensor/tensor.h"

namespace vls::kernels {
namespace {

struct Case {
  int64_t M, K, N;
};
// K not a multiple of 16 or 32 (brgemm K tails), N odd or below one 16/64-wide block, M from a
// decode row through tails of the row blocks to more than one 512-row block.
constexpr Case kCases[] = {{1, 77, 5},     {3, 130, 33},  {17, 1000, 31}, {64, 67, 64},
                           {64, 2049, 65}, {513, 96, 17}, {513, 333, 129}};

using testing::Random;

// Both sides multiply the same BF16 values (each product is exact in f32) and accumulate in
// f32, so only the summation order differs: testing::F32Bound (oneDNN's brgemm sums K in
// vdpbf16ps pairs and register blocks, and may split K across threads).
using testing::F32Bound;

// Inputs for one case: BF16 activations (and their f32 widening), BF16 weights, reference.
struct Problem {
  Case c;
  std::vector<uint16_t> xb;
  std::vector<float> xr, wf, ref;
  HostTensor wt;
  Matrix w;
  std::vector<float> x;  // the f32 activations xb was rounded from

  explicit Problem(const Case& cs) : c(cs) {
    x = Random(size_t(c.M * c.K), 21);
    xb.resize(x.size());
    xr.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i] = F32ToBf16(x[i]);
      xr[i] = Bf16ToF32(xb[i]);
    }
    wt = FromF32As(DType::kBF16, {c.N, c.K}, Random(size_t(c.N * c.K), 22));
    w = Matrix{DType::kBF16, wt.data(), c.N, c.K};
    wf.resize(size_t(c.N * c.K));
    for (int64_t n = 0; n < c.N; ++n) LoadRow(w, n, &wf[size_t(n * c.K)]);
    ref.resize(size_t(c.M * c.N));
    MatMulTransposed(xr.data(), c.M, c.K, w, ref.data());
  }

  void Check(const std::vector<float>& got, const char* what) const {
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) {
        const double tol = 2 * F32Bound(&xr[size_t(m * c.K)], &wf[size_t(n * c.K)], c.K);
        ASSERT_NEAR(got[size_t(m * c.N + n)], ref[size_t(m * c.N + n)], tol)
            << what << " M=" << c.M << " K=" << c.K << " N=" << c.N << " at " << m << "," << n;
      }
    }
  }
};

#define SKIP_WITHOUT_ONEDNN() \
  if (!OneDnnBf16Available()) GTEST_SKIP() << "no oneDNN BF16 matmul in this build/CPU"

TEST(OneDnnMatMulTest, PlainWeightsMatchReference) {
  SKIP_WITHOUT_ONEDNN();
  for (const Case& c : kCases) {
    const Problem p(c);
    for (int threads : {1, 2}) {
      std::vector<float> got(p.ref.size(), -1.0f);
      const Status s = OneDnnMatMulBf16(p.xb.data(), c.M, c.K, p.w, threads, got.data());
      ASSERT_TRUE(s.ok()) << s.ToString();
      p.Check(got, "plain");
    }
  }
}

TEST(OneDnnMatMulTest, ColumnBlocksMatchReference) {
  // Uneven blocks, as the pool hands them out: y's row stride stays N in every call.
  SKIP_WITHOUT_ONEDNN();
  for (const Case& c : kCases) {
    const Problem p(c);
    std::vector<float> got(p.ref.size(), -1.0f);
    const int64_t cuts[] = {0, c.N / 3, c.N / 3 + (c.N + 1) / 2, c.N};
    for (int i = 0; i < 3; ++i) {
      if (cuts[i] == cuts[i + 1]) continue;
      const Status s =
          OneDnnMatMulBf16Columns(p.xb.data(), c.M, c.K, p.w, cuts[i], cuts[i + 1], got.data());
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    p.Check(got, "columns");
  }
  const Problem p(kCases[1]);
  std::vector<float> y(p.ref.size());
  EXPECT_FALSE(OneDnnMatMulBf16Columns(p.xb.data(), 3, 130, p.w, 5, 5, y.data()).ok());
  EXPECT_FALSE(OneDnnMatMulBf16Columns(p.xb.data(), 3, 130, p.w, 0, 34, y.data()).ok());
}

TEST(OneDnnMatMulTest, PackedWeightsMatchReferenceAtEveryM) {
  SKIP_WITHOUT_ONEDNN();
  for (const Case& c : kCases) {
    const Problem p(c);
    StatusOr<std::unique_ptr<OneDnnPackedBf16>> packed = OneDnnPackedBf16::Create(p.w, 2);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    EXPECT_EQ((*packed)->rows(), c.N);
    EXPECT_EQ((*packed)->cols(), c.K);
    EXPECT_GE((*packed)->bytes(), size_t(c.N * c.K * 2));
    std::vector<float> got(p.ref.size(), -1.0f);
    const Status s = (*packed)->MatMul(p.xb.data(), c.M, 2, got.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    p.Check(got, "packed");
  }
}

TEST(OneDnnMatMulTest, RejectsNonBf16Weights) {
  const std::vector<float> wf(12, 1.0f);
  const Matrix w{DType::kF32, wf.data(), 3, 4};
  std::vector<uint16_t> xb(8, 0);
  std::vector<float> y(6);
  EXPECT_FALSE(OneDnnMatMulBf16(xb.data(), 2, 4, w, 1, y.data()).ok());
  EXPECT_FALSE(OneDnnPackedBf16::Create(w, 1).ok());
}

TEST(OneDnnMatMulTest, RoundingEntryRejectsPackedWeightsOfAnotherShape) {
  SKIP_WITHOUT_ONEDNN();
  const Problem p(Case{40, 64, 48}), q(Case{40, 64, 16});
  StatusOr<std::unique_ptr<OneDnnPackedBf16>> other = OneDnnPackedBf16::Create(q.w, 1);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  std::vector<float> y(p.ref.size());
  EXPECT_EQ(OneDnnMatMulRoundingX(p.x.data(), 40, 64, p.w, other->get(), 1, y.data()).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(OneDnnMatMulRoundingX(p.x.data(), 40, 64, p.w, nullptr, 1, y.data()).ok());
  p.Check(y, "rounding entry");
}

TEST(OneDnnMatMulTest, ContextRoutesLargeBf16MatMulsAndMatchesReference) {
  // Context::MatMul rounds x to BF16 itself, so the reference sees the same rounded values.
  for (const KernelVariant* v : SupportedVariants()) {
    const Context ctx(2, Precision::kBF16, v);
    if (v == &ReferenceVariant()) {
      EXPECT_FALSE(ctx.uses_onednn()) << "the reference variant is the oracle; never oneDNN";
      continue;
    }
    EXPECT_EQ(ctx.uses_onednn(), OneDnnBf16Available() && std::getenv("VLS_ONEDNN") == nullptr)
        << v->name;
    if (v->matmul_bf16 == nullptr) continue;
    for (const Case& c : kCases) {
      const Problem p(c);
      std::vector<float> got(p.ref.size(), -1.0f);
      ctx.MatMul(p.x.data(), c.M, c.K, p.w, got.data());
      p.Check(got, v->name);
      if (!ctx.uses_onednn() || c.M < kOneDnnMinRows) continue;
      StatusOr<std::unique_ptr<OneDnnPackedBf16>> packed = OneDnnPackedBf16::Create(p.w, 2);
      ASSERT_TRUE(packed.ok()) << packed.status().ToString();
      std::vector<float> got_packed(p.ref.size(), -1.0f);
      ctx.MatMul(p.x.data(), c.M, c.K, p.w, got_packed.data(), packed->get());
      p.Check(got_packed, "Context packed");
    }
  }
}

}  // namespace
}  // namespace vls::kernels
