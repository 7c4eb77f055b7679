// The BF16 blocked format: packing, LoadRow, and every blocked matmul (each variant's kernel,
// oneDNN reading the blocked buffer in place, Context::MatMul) against the reference.
#include "kernels/bf16_blocked.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "kernels/onednn_matmul.h"
#include "tensor/tensor.h"

namespace vls::kernels {
namespace {

using testing::F32Bound;
using testing::Random;

struct Case {
  int64_t M, K, N;
};
// K odd or not a multiple of 32 (padded column blocks, the one-column last pair), N not a
// multiple of 64 or 16 (padded row blocks, masked stores), M across the 4-row tiles, and K
// across the 64-pair chunks that M > 4 walks (M = 31: all eight tiles of a chunk).
constexpr Case kCases[] = {{1, 1, 1},     {1, 77, 5},    {3, 130, 33},  {17, 67, 31},
                           {3, 512, 141}, {17, 1000, 7}, {8, 2049, 65}, {8, 64, 128},
                           {5, 33, 200},  {40, 96, 300}, {31, 259, 70}};

// A zeroed blocked buffer holding the dense matrix w.
std::vector<uint16_t> Pack(const Matrix& w) {
  std::vector<uint16_t> out(static_cast<size_t>(Bf16BlockedBytes(w.rows, w.cols) / 2));
  PackBf16Blocked(w, 0, w.rows, out.data(), w.rows, 0);
  return out;
}

TEST(Bf16BlockedTest, SizesPadToWholeBlocks) {
  EXPECT_EQ(Bf16BlockedBytes(1, 1), 64 * 32 * 2);
  EXPECT_EQ(Bf16BlockedBytes(64, 32), 64 * 32 * 2);
  EXPECT_EQ(Bf16BlockedBytes(65, 33), 128 * 64 * 2);
  EXPECT_EQ(Bf16BlockedBytes(4096, 1024), 4096 * 1024 * 2);
  // One column pair of 64 rows is contiguous; the next pair follows it.
  EXPECT_EQ(Bf16BlockedIndex(0, 1, 32), 1);
  EXPECT_EQ(Bf16BlockedIndex(1, 0, 32), 2);
  EXPECT_EQ(Bf16BlockedIndex(0, 2, 32), 128);
  EXPECT_EQ(Bf16BlockedIndex(0, 32, 64), 2048);
  EXPECT_EQ(Bf16BlockedIndex(64, 0, 64), 64 * 64);
}

TEST(Bf16BlockedTest, PackThenLoadRowGivesTheRoundedValuesAndZeroPadding) {
  const int64_t N = 70, K = 45;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor wt = FromF32As(dt, {N, K}, Random(size_t(N * K), 11));
    const Matrix src{dt, wt.data(), N, K};
    const std::vector<uint16_t> packed = Pack(src);
    const Matrix b = Bf16BlockedMatrixAt(packed.data(), N, K);
    EXPECT_EQ(b.format, MatrixFormat::kBf16Blocked);
    EXPECT_EQ(b.dtype, DType::kBF16);
    std::vector<float> row(static_cast<size_t>(K)), want(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
      LoadRow(b, n, row.data());
      LoadRow(src, n, want.data());
      for (int64_t k = 0; k < K; ++k) {
        ASSERT_EQ(row[size_t(k)], Bf16ToF32(F32ToBf16(want[size_t(k)])))
            << DTypeName(dt) << " " << n << "," << k;
      }
    }
    // Everything past row N or column K is still zero.
    const int64_t kp = Bf16PaddedCols(K);
    for (int64_t n = 0; n < Bf16PaddedRows(N); ++n) {
      for (int64_t k = 0; k < kp; ++k) {
        if (n < N && k < K) continue;
        ASSERT_EQ(packed[size_t(Bf16BlockedIndex(n, k, kp))], 0) << n << "," << k;
      }
    }
  }
}

TEST(Bf16BlockedTest, StackedPartsPackLikeTheStackedMatrix) {
  const int64_t K = 40;
  const std::vector<float> a = Random(size_t(30 * K), 12), b = Random(size_t(50 * K), 13);
  std::vector<float> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  const std::vector<uint16_t> whole = Pack(Matrix{DType::kF32, ab.data(), 80, K});
  std::vector<uint16_t> parts(whole.size());
  // Each part in two row ranges, as the loader's chunks.
  PackBf16Blocked(Matrix{DType::kF32, a.data(), 30, K}, 0, 7, parts.data(), 80, 0);
  PackBf16Blocked(Matrix{DType::kF32, a.data(), 30, K}, 7, 30, parts.data(), 80, 0);
  PackBf16Blocked(Matrix{DType::kF32, b.data(), 50, K}, 0, 50, parts.data(), 80, 30);
  EXPECT_EQ(parts, whole);
}

// One product: random x[M, K] and w[N, K] (packed blocked), x rounded to BF16, and the
// reference y = xr · wᵀ on the rounded activations.
struct Problem {
  int64_t M, K, N;
  std::vector<float> x, xr, wf, y;
  std::vector<uint16_t> xb, packed;
  Matrix w;
  Problem(int64_t m, int64_t k, int64_t n, uint32_t x_seed, uint32_t w_seed)
      : M(m), K(k), N(n), x(Random(size_t(m * k), x_seed)) {
    const std::vector<float> wd = Random(size_t(N * K), w_seed);
    packed = Pack(Matrix{DType::kF32, wd.data(), N, K});
    w = Bf16BlockedMatrixAt(packed.data(), N, K);
    xb.resize(x.size());
    xr.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i] = F32ToBf16(x[i]);
      xr[i] = Bf16ToF32(xb[i]);
    }
    wf.resize(size_t(N * K));
    for (int64_t r = 0; r < N; ++r) LoadRow(w, r, &wf[size_t(r * K)]);
    y.resize(size_t(M * N));
    MatMulTransposed(xr.data(), M, K, w, y.data());
  }
  // got[M, N] within the f32 summation bound of y: products of two BF16 values are exact in
  // f32, so only the order of the f32 sums differs.
  ::testing::AssertionResult Matches(const std::vector<float>& got) const {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const double want = y[size_t(m * N + n)],
                     tol = 2 * F32Bound(&xr[size_t(m * K)], &wf[size_t(n * K)], K);
        if (std::fabs(got[size_t(m * N + n)] - want) > tol) {
          return ::testing::AssertionFailure()
                 << "M=" << M << " K=" << K << " N=" << N << " at " << m << "," << n << ": "
                 << got[size_t(m * N + n)] << " vs " << want << " (tolerance " << tol << ")";
        }
      }
    }
    return ::testing::AssertionSuccess();
  }
};

TEST(Bf16BlockedTest, EveryBlockedKernelMatchesReference) {
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->matmul_bf16_blocked == nullptr) continue;
    for (const Case& c : kCases) {
      const Problem p(c.M, c.K, c.N, 14, 15);
      std::vector<float> got(size_t(c.M * c.N), -1.0f);
      // Two calls split at a 64-row block, as the pool does.
      const int64_t mid = std::min<int64_t>(c.N, kBf16BlockN);
      v->matmul_bf16_blocked(p.xb.data(), c.M, c.K, p.w, 0, mid, got.data());
      if (mid < c.N) v->matmul_bf16_blocked(p.xb.data(), c.M, c.K, p.w, mid, c.N, got.data());
      ASSERT_TRUE(p.Matches(got)) << v->name;
    }
  }
}

TEST(Bf16BlockedTest, ARowsResultDoesNotDependOnM) {
  // Batched decode must give each sequence what it would get alone, bit for bit.
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->matmul_bf16_blocked == nullptr) continue;
    const Problem p(11, 300, 130, 16, 17);
    Context ctx(2, Precision::kBF16, v);
    std::vector<float> all(size_t(p.M * p.N)), one(size_t(p.N));
    ctx.MatMul(p.x.data(), p.M, p.K, p.w, all.data());
    for (int64_t m = 0; m < p.M; ++m) {
      ctx.MatMul(&p.x[size_t(m * p.K)], 1, p.K, p.w, one.data());
      for (int64_t n = 0; n < p.N; ++n) {
        ASSERT_EQ(one[size_t(n)], all[size_t(m * p.N + n)]) << v->name << " " << m << "," << n;
      }
    }
  }
}

TEST(Bf16BlockedTest, ContextMatMulMatchesReferenceOnEveryPath) {
  // M >= kOneDnnMinRows goes through oneDNN (reading the blocked buffer in place) when the
  // build has it; disabled, through the variant's kernel; the reference variant through
  // LoadRow. All must agree with the reference within the f32 summation bound.
  for (const KernelVariant* v : SupportedVariants()) {
    for (bool onednn : {true, false}) {
      for (const Case& c : kCases) {
        const Problem p(c.M < 8 ? c.M : c.M + kOneDnnMinRows, c.K, c.N, 18, 19);
        Context ctx(2, Precision::kBF16, v);
        if (!onednn) ctx.DisableOneDnn();
        std::vector<float> got(size_t(p.M * p.N), -1.0f);
        ctx.MatMul(p.x.data(), p.M, p.K, p.w, got.data());
        ASSERT_TRUE(p.Matches(got)) << v->name << (onednn ? " onednn" : "");
      }
    }
  }
}

TEST(Bf16BlockedTest, AVariantWithoutOneDnnBlockedRunsItsKernelAtEveryRowCount) {
  // "avx512bf16-fma" (onednn_blocked false) keeps prefill-sized products on its own kernel even
  // with oneDNN on: Context's result is the kernel's, bit for bit (a row's result does not depend
  // on how the pool splits N).
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->onednn_blocked || v->matmul_bf16_blocked == nullptr) continue;
    const Problem p(kOneDnnMinRows + 9, 300, 200, 20, 21);
    const Context ctx(2, Precision::kBF16, v);
    std::vector<float> got(size_t(p.M * p.N)), want(size_t(p.M * p.N));
    ctx.MatMul(p.x.data(), p.M, p.K, p.w, got.data());
    v->matmul_bf16_blocked(p.xb.data(), p.M, p.K, p.w, 0, p.N, want.data());
    ASSERT_EQ(got, want) << v->name;
    ASSERT_TRUE(p.Matches(got)) << v->name;
  }
}

TEST(Bf16BlockedTest, OneDnnRowsRunTheBlockedLayoutAndRejectBadRanges) {
  if (!OneDnnBf16Available()) GTEST_SKIP() << "no oneDNN in this build";
  const Problem p(40, 100, 130, 20, 21);
  std::vector<float> y(size_t(p.M * p.N), -1.0f);
  for (auto [m0, m1] : {std::pair<int64_t, int64_t>{0, 33}, {33, 40}}) {
    const Status s = OneDnnMatMulBf16BlockedRows(p.xb.data(), p.M, p.K, p.w, m0, m1, y.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_TRUE(p.Matches(y));
  EXPECT_FALSE(OneDnnMatMulBf16BlockedRows(p.xb.data(), p.M, p.K, p.w, 30, 41, y.data()).ok());
  const Matrix dense{DType::kBF16, p.packed.data(), p.N, p.K};
  EXPECT_FALSE(OneDnnMatMulBf16BlockedRows(p.xb.data(), p.M, p.K, dense, 0, 40, y.data()).ok());
}

}  // namespace
}  // namespace vls::kernels
