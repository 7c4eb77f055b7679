// The Q6 blocked format (q6.h): quantizer, layout, the reference matmul against a
// double-precision evaluation of the same codes, and every Q6 kernel (each variant's, and the
// scalar emulation of the AVX512-VNNI one) against the reference bit for bit.
#include "kernels/q6.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "tensor/dtype.h"

namespace vls::kernels {
// matmul_avx512_q4.cc built with VLS_AVX512_EMULATION (scalar intrinsics) into q4_test and this.
const Q4Kernels& EmulatedAvx512VnniQ4Kernels();

namespace {

using testing::Q4Input;
using testing::Random;

struct Q6Weights {
  Q6Weights(int64_t N, int64_t K, uint32_t seed) : v(Random(size_t(N * K), seed, 0.05f)) {
    if (N > 2) std::fill_n(v.begin() + 2 * K, 32, 0.0f);  // a zero group
    if (N > 3) std::fill_n(v.begin() + 3 * K, 32, 0.5f);  // a constant group
    buf = static_cast<uint8_t*>(std::aligned_alloc(64, size_t(Q6Bytes(N, K))));
    QuantizeQ6(Matrix{DType::kF32, v.data(), N, K}, 0, N, buf, N, 0);
    m = Q6MatrixAt(buf, N, K);
  }
  ~Q6Weights() { std::free(buf); }
  Q6Weights(const Q6Weights&) = delete;
  Q6Weights& operator=(const Q6Weights&) = delete;
  std::vector<float> v;
  uint8_t* buf;
  Matrix m;
};

TEST(Q6Test, GroupOnAnF16GridIsCodedExactly) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.125f * static_cast<float>((i * 13) % 63 - 31);
  uint16_t d = 0;
  uint8_t u[32];
  QuantizeQ6Group(x, &d, u);
  EXPECT_EQ(F16ToF32(d), 0.125f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(u[i], (i * 13) % 63 + 1) << i;
}

TEST(Q6Test, ZeroGroupHasZeroScaleAndZeroCodes) {
  float x[32] = {};
  uint16_t d = 1;
  uint8_t u[32];
  QuantizeQ6Group(x, &d, u);
  EXPECT_EQ(F16ToF32(d), 0.0f);
  for (uint8_t c : u) EXPECT_EQ(c, kQ6Zero);
}

// Every value is within one step d of its code (the search may shrink the step so that the
// largest value clamps at ±31, missing by less than a step), and the RMS error is below the
// uniform-quantization bound amax / 31 / sqrt(12) of the plain round-to-nearest code.
TEST(Q6Test, RoundTripErrorIsWithinAStepForEveryDType) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    constexpr int64_t N = 21, K = 96;
    std::vector<float> v = Random(size_t(N * K), 3);
    std::vector<uint16_t> half(v.size());
    const void* data = v.data();
    if (dt != DType::kF32) {
      for (size_t i = 0; i < v.size(); ++i) {
        half[i] = dt == DType::kBF16 ? F32ToBf16(v[i]) : F32ToF16(v[i]);
        v[i] = dt == DType::kBF16 ? Bf16ToF32(half[i]) : F16ToF32(half[i]);
      }
      data = half.data();
    }
    std::vector<uint8_t> buf(size_t(Q6Bytes(N, K)));
    QuantizeQ6(Matrix{dt, data, N, K}, 0, N, buf.data(), N, 0);
    const Matrix m = Q6MatrixAt(buf.data(), N, K);
    std::vector<float> row(K);
    double se = 0.0, bound = 0.0;
    for (int64_t r = 0; r < N; ++r) {
      LoadRow(m, r, row.data());
      for (int64_t g = 0; g < K / 32; ++g) {
        const float d = Q6Scale(m, r, g);
        float amax = 0.0f;
        for (int64_t k = g * 32; k < (g + 1) * 32; ++k) {
          const float x = v[size_t(r * K + k)];
          amax = std::max(amax, std::fabs(x));
          EXPECT_LE(std::fabs(row[size_t(k)] - x), d * 1.0001f) << r << " " << k;
          se += double(row[size_t(k)] - x) * (row[size_t(k)] - x);
        }
        bound += double(amax) * amax / (31.0 * 31.0) / 12.0 * 32.0;
      }
    }
    EXPECT_LT(se, bound) << DTypeName(dt);
  }
}

TEST(Q6Test, StackedPartsEqualTheWholeAndPaddingIsZero) {
  constexpr int64_t N = 37, K = 64;  // 3 row groups, the last with 11 padding rows
  const std::vector<float> v = Random(size_t(N * K), 5);
  std::vector<uint8_t> whole(size_t(Q6Bytes(N, K)), 0xAA), parts(whole.size(), 0x55);
  QuantizeQ6(Matrix{DType::kF32, v.data(), N, K}, 0, N, whole.data(), N, 0);
  const Matrix a{DType::kF32, v.data(), 20, K}, b{DType::kF32, v.data() + 20 * K, 17, K};
  QuantizeQ6(a, 10, 20, parts.data(), N, 0);
  QuantizeQ6(a, 0, 10, parts.data(), N, 0);
  QuantizeQ6(b, 0, 17, parts.data(), N, 20);
  EXPECT_EQ(whole, parts);
  const Matrix m = Q6MatrixAt(whole.data(), N, K);
  for (int64_t r = N; r < 48; ++r) {
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(Q6Code(m, r, k), 0);
    EXPECT_EQ(Q6Scale(m, r, 0), 0.0f);
  }
  // Each stored code and scale is the group quantizer's.
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t g = 0; g < K / 32; ++g) {
      uint16_t d = 0;
      uint8_t u[32];
      QuantizeQ6Group(v.data() + r * K + g * 32, &d, u);
      EXPECT_EQ(Q6Scale(m, r, g), F16ToF32(d));
      for (int64_t k = 0; k < 32; ++k) ASSERT_EQ(Q6Code(m, r, g * 32 + k), u[k]) << r << " " << k;
    }
  }
}

// As the Q4 reference test: group terms are exact in int32 and the f32 steps round at most
// twice per group, so the difference is within 1e-6 of Σ|terms|.
TEST(Q6Test, ReferenceMatMulEqualsTheCodesInDouble) {
  constexpr int64_t M = 5, K = 256, N = 35;
  const Q6Weights w(N, K, 11);
  const std::vector<float> x = Random(size_t(M * K), 12);
  Q4Input in(M, K);
  QuantizeActivationsQ4(x.data(), 0, M, in.a);
  std::vector<float> y(size_t(M * N));
  RefMatMulQ6(in.a, w.m, 0, N, y.data());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0.0, mag = 0.0;
      for (int64_t g = 0; g < K / 32; ++g) {
        int64_t dot = 0;
        for (int64_t k = g * 32; k < (g + 1) * 32; ++k) {
          dot += int64_t{in.a.q[m * K + k]} * (Q6Code(w.m, n, k) - kQ6Zero);
        }
        const double term = double(in.a.scales[m * 8 + g]) * double(Q6Scale(w.m, n, g)) * dot;
        exact += term;
        mag += std::fabs(term);
      }
      EXPECT_NEAR(y[size_t(m * N + n)], exact, 1e-6 * mag + 1e-30) << m << " " << n;
    }
  }
}

struct Case {
  int64_t M, K, N;
};
// M: the decode tiles (1, 2, 3), the one tile of 5-8 rows, 4-row tiles with remainders; N:
// partial 16-row groups, tails of fewer than 4 or 2 row groups, several chunks of 8; K: one
// group to many.
constexpr Case kCases[] = {{1, 32, 1},    {1, 64, 17},    {2, 96, 33},  {3, 128, 70},
                           {4, 32, 16},   {5, 64, 49},    {6, 96, 45},  {7, 160, 31},
                           {8, 256, 300}, {9, 32, 130},   {16, 64, 65}, {17, 96, 19},
                           {33, 128, 41}, {1, 1024, 200}, {40, 64, 150}};

void ExpectEqualToReference(const Q4Kernels& k) {
  ASSERT_NE(k.matmul_q6, nullptr) << k.name;
  for (const Case& c : kCases) {
    const Q6Weights w(c.N, c.K, uint32_t(c.M * 1000 + c.N));
    std::vector<float> x = Random(size_t(c.M * c.K), uint32_t(c.K));
    std::fill_n(x.begin(), 32, 0.0f);  // a zero group
    Q4Input in(c.M, c.K);
    QuantizeActivationsQ4(x.data(), 0, c.M, in.a);
    std::vector<float> yr(size_t(c.M * c.N), -1.0f), yg(yr.size(), -2.0f);
    RefMatMulQ6(in.a, w.m, 0, c.N, yr.data());
    // In two column ranges, split inside a 16-row group, as a caller splitting N may.
    const int64_t split = std::min<int64_t>(c.N, 16 * ((c.N / 2 + 15) / 16) - 5);
    k.matmul_q6(in.a, w.m, 0, std::max<int64_t>(split, 0), yg.data());
    k.matmul_q6(in.a, w.m, std::max<int64_t>(split, 0), c.N, yg.data());
    for (size_t i = 0; i < yr.size(); ++i) {
      ASSERT_EQ(yr[i], yg[i]) << k.name << " M=" << c.M << " K=" << c.K << " N=" << c.N << " at "
                              << i;
    }
  }
}

// The largest int32 group sums: every code 63 (all bits set) against activations of +127 and of
// −127 everywhere (an AVX2 kernel adding u8 × s8 products in int16 would overflow here first).
TEST(Q6Test, EveryVariantsKernelsAreExactAtExtremeCodes) {
  std::vector<const Q4Kernels*> kernels = {&EmulatedAvx512VnniQ4Kernels()};
  for (const KernelVariant* v : SupportedVariants()) kernels.push_back(&Q4KernelsFor(*v));
  for (const Q4Kernels* k : kernels) {
    for (const Case& c : {Case{1, 256, 40}, Case{4, 128, 33}, Case{5, 64, 17}}) {
      Q6Weights w(c.N, c.K, 31);
      const int64_t scales = Q6ScalesOffset(c.N, c.K);
      std::fill_n(w.buf, scales, uint8_t{0xff});  // codes 63: q = 31
      auto* h = reinterpret_cast<uint16_t*>(w.buf + scales);
      std::fill_n(h, Q6RowGroups(c.N) * Q6Groups(c.K) * 16, uint16_t{0x3c00});  // d = 1
      for (const float sign : {1.0f, -1.0f}) {
        const std::vector<float> x(size_t(c.M * c.K), sign);
        Q4Input a(c.M, c.K);
        k->quantize(x.data(), 0, c.M, a.a);
        std::vector<float> yr(size_t(c.M * c.N)), yg(yr.size());
        RefMatMulQ6(a.a, w.m, 0, c.N, yr.data());
        k->matmul_q6(a.a, w.m, 0, c.N, yg.data());
        for (size_t i = 0; i < yr.size(); ++i) {
          // Σ over K of 31 · ±127 · s, s = 1/127 rounded to f32.
          ASSERT_NEAR(yr[i], sign * 31.0f * static_cast<float>(c.K), 1e-3 * c.K) << k->name;
          ASSERT_EQ(yg[i], yr[i]) << k->name << " M=" << c.M << " at " << i;
        }
      }
    }
  }
}

TEST(Q6Test, EmulatedVnniKernelEqualsTheReferenceBitForBit) {
  ExpectEqualToReference(EmulatedAvx512VnniQ4Kernels());
}

TEST(Q6Test, EveryVariantsKernelEqualsTheReferenceBitForBit) {
  for (const KernelVariant* v : SupportedVariants()) ExpectEqualToReference(Q4KernelsFor(*v));
}

// Context::MatMul routes kQ6 weights to the variant's Q6 kernel over the pool (2 threads).
TEST(Q6Test, ContextMatMulEqualsTheReference) {
  for (const KernelVariant* v : SupportedVariants()) {
    const Context ctx(2, Precision::kInt4, v);
    for (const Case& c : {Case{1, 128, 300}, Case{20, 96, 77}}) {
      const Q6Weights w(c.N, c.K, 21);
      const std::vector<float> x = Random(size_t(c.M * c.K), 22);
      Q4Input in(c.M, c.K);
      QuantizeActivationsQ4(x.data(), 0, c.M, in.a);
      std::vector<float> want(size_t(c.M * c.N)), got(want.size());
      RefMatMulQ6(in.a, w.m, 0, c.N, want.data());
      ctx.MatMul(x.data(), c.M, c.K, w.m, got.data());
      EXPECT_EQ(want, got) << v->name;
    }
  }
}

}  // namespace
}  // namespace vls::kernels
