// The Q4 blocked format (q4.h): quantizer, layout, activation quantizer, the reference matmul
// against a double-precision evaluation of the same codes, and every Q4 kernel (the AVX512-VNNI
// one where the CPU has it, and always its scalar emulation) against the reference bit for bit.
#include "kernels/q4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "tensor/dtype.h"

namespace vls::kernels {
// matmul_avx512_q4.cc built with VLS_AVX512_EMULATION (scalar intrinsics) into this test.
const Q4Kernels& EmulatedAvx512VnniQ4Kernels();

namespace {

using testing::Q4Input;
using testing::Random;

struct Q4Weights {
  Q4Weights(int64_t N, int64_t K, uint32_t seed) : v(Random(size_t(N * K), seed, 0.05f)) {
    if (N > 2) std::fill_n(v.begin() + 2 * K, 32, 0.0f);  // a zero group
    if (N > 3) std::fill_n(v.begin() + 3 * K, 32, 0.5f);  // a constant group
    buf = static_cast<uint8_t*>(std::aligned_alloc(64, size_t(Q4Bytes(N, K))));
    QuantizeQ4(Matrix{DType::kF32, v.data(), N, K}, 0, N, buf, N, 0);
    m = Q4MatrixAt(buf, N, K);
  }
  ~Q4Weights() { std::free(buf); }
  std::vector<float> v;
  uint8_t* buf;
  Matrix m;
};

TEST(Q4Test, GroupOnAnF16GridIsCodedExactly) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * static_cast<float>((i * 7) % 16) - 1.0f;
  uint16_t d = 0, m = 0;
  uint8_t q[32];
  QuantizeQ4Group(x, &d, &m, q);
  EXPECT_EQ(F16ToF32(d), 0.25f);
  EXPECT_EQ(F16ToF32(m), -1.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], (i * 7) % 16) << i;
}

TEST(Q4Test, ConstantGroupHasZeroScaleAndItsValueAsMin) {
  float x[32];
  std::fill_n(x, 32, -0.375f);
  uint16_t d = 1, m = 0;
  uint8_t q[32];
  QuantizeQ4Group(x, &d, &m, q);
  EXPECT_EQ(F16ToF32(d), 0.0f);
  EXPECT_EQ(F16ToF32(m), -0.375f);
  for (uint8_t c : q) EXPECT_EQ(c, 0);
}

// Every value is within one step d of its code (the search may move the range's ends by less
// than a step, so the clamped extremes can miss by more than d / 2), and the RMS error is well
// below the uniform-quantization d / sqrt(12) bound of a 16-level grid spanning the range.
TEST(Q4Test, RoundTripErrorIsWithinAStepForEveryDType) {
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
    std::vector<uint8_t> buf(size_t(Q4Bytes(N, K)));
    QuantizeQ4(Matrix{dt, data, N, K}, 0, N, buf.data(), N, 0);
    const Matrix m = Q4MatrixAt(buf.data(), N, K);
    std::vector<float> row(K);
    double se = 0.0, range2 = 0.0;
    for (int64_t r = 0; r < N; ++r) {
      LoadRow(m, r, row.data());
      for (int64_t g = 0; g < K / 32; ++g) {
        const float d = Q4Scale(m, r, g);
        float lo = v[size_t(r * K + g * 32)], hi = lo;
        for (int64_t k = g * 32; k < (g + 1) * 32; ++k) {
          const float x = v[size_t(r * K + k)];
          lo = std::min(lo, x);
          hi = std::max(hi, x);
          EXPECT_LE(std::fabs(row[size_t(k)] - x), d * 1.0001f) << r << " " << k;
          se += double(row[size_t(k)] - x) * (row[size_t(k)] - x);
        }
        range2 += double(hi - lo) * (hi - lo) / 225.0 / 12.0 * 32.0;
      }
    }
    EXPECT_LT(se, range2) << DTypeName(dt);
  }
}

TEST(Q4Test, StackedPartsEqualTheWholeAndPaddingIsZero) {
  constexpr int64_t N = 37, K = 64;  // 3 row groups, the last with 11 padding rows
  const std::vector<float> v = Random(size_t(N * K), 5);
  std::vector<uint8_t> whole(size_t(Q4Bytes(N, K)), 0xAA), parts(whole.size(), 0x55);
  QuantizeQ4(Matrix{DType::kF32, v.data(), N, K}, 0, N, whole.data(), N, 0);
  // Rows 0..19 and 20..36 as two matrices, each in two row ranges.
  const Matrix a{DType::kF32, v.data(), 20, K}, b{DType::kF32, v.data() + 20 * K, 17, K};
  QuantizeQ4(a, 10, 20, parts.data(), N, 0);
  QuantizeQ4(a, 0, 10, parts.data(), N, 0);
  QuantizeQ4(b, 0, 17, parts.data(), N, 20);
  EXPECT_EQ(whole, parts);
  const Matrix m = Q4MatrixAt(whole.data(), N, K);
  for (int64_t r = N; r < 48; ++r) {
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(Q4Code(m, r, k), 0);
    EXPECT_EQ(Q4Scale(m, r, 0), 0.0f);
    EXPECT_EQ(Q4Min(m, r, 1), 0.0f);
  }
}

TEST(Q4Test, ActivationsAreWithinHalfAScaleAndSumsAreExact) {
  constexpr int64_t M = 3, K = 128;
  std::vector<float> x = Random(size_t(M * K), 9);
  std::fill_n(x.begin() + 32, 32, 0.0f);  // a zero group
  Q4Input in(M, K);
  QuantizeActivationsQ4(x.data(), 0, M, in.a);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t g = 0; g < K / 32; ++g) {
      const float s = in.a.scales[r * 4 + g];
      int32_t sum = 0;
      for (int64_t k = g * 32; k < (g + 1) * 32; ++k) {
        sum += in.a.q[r * K + k];
        EXPECT_LE(std::fabs(s * in.a.q[r * K + k] - x[size_t(r * K + k)]), 0.5001f * s);
      }
      EXPECT_EQ(in.a.sums[r * 4 + g], static_cast<float>(sum));
      if (r == 0 && g == 1) {
        EXPECT_EQ(s, 0.0f);
      }
    }
  }
}

// The reference product against the same codes evaluated in double: each group term is exact
// in int32 and the f32 steps round at most 3 times per group, so the difference is within
// 3 · 2⁻²⁴ of Σ|terms| per group (1e-6 of that sum bounds it).
TEST(Q4Test, ReferenceMatMulEqualsTheCodesInDouble) {
  constexpr int64_t M = 5, K = 256, N = 35;
  const Q4Weights w(N, K, 11);
  const std::vector<float> x = Random(size_t(M * K), 12);
  Q4Input in(M, K);
  QuantizeActivationsQ4(x.data(), 0, M, in.a);
  std::vector<float> y(size_t(M * N));
  RefMatMulQ4(in.a, w.m, 0, N, y.data());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0.0, mag = 0.0;
      for (int64_t g = 0; g < K / 32; ++g) {
        int64_t dot = 0, sum = 0;
        for (int64_t k = g * 32; k < (g + 1) * 32; ++k) {
          dot += int64_t{in.a.q[m * K + k]} * Q4Code(w.m, n, k);
          sum += in.a.q[m * K + k];
        }
        const double term =
            double(in.a.scales[m * 8 + g]) *
            (double(Q4Scale(w.m, n, g)) * double(dot) + double(Q4Min(w.m, n, g)) * double(sum));
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
// M: every decode tile (1, 2, 3), batched decode and prefill tiles of 8 with remainders of 4, 2
// and 1; N: partial 16-row groups, several chunks of 8 row groups, tails of fewer than NG row
// groups; K: one group to many. M 33 and 40 with N 150 and 300: three row tiles or more over
// several chunks, whose later passes prefetch the next chunk.
constexpr Case kCases[] = {{1, 32, 1},     {1, 64, 17},   {2, 96, 33},   {3, 128, 70},
                           {4, 32, 16},    {5, 64, 49},   {7, 160, 31},  {8, 256, 300},
                           {9, 32, 130},   {16, 64, 65},  {17, 96, 19},  {33, 128, 41},
                           {1, 1024, 200}, {40, 64, 150}, {33, 160, 300}};

void ExpectEqualToReference(const Q4Kernels& k) {
  for (const Case& c : kCases) {
    const Q4Weights w(c.N, c.K, uint32_t(c.M * 1000 + c.N));
    std::vector<float> x = Random(size_t(c.M * c.K), uint32_t(c.K));
    std::fill_n(x.begin(), 32, 0.0f);  // a zero group
    Q4Input ref(c.M, c.K), got(c.M, c.K);
    QuantizeActivationsQ4(x.data(), 0, c.M, ref.a);
    k.quantize(x.data(), 0, c.M, got.a);
    ASSERT_EQ(0, std::memcmp(ref.a.q, got.a.q, size_t(c.M * c.K))) << k.name;
    for (int64_t i = 0; i < c.M * (c.K / 32); ++i) {
      ASSERT_EQ(ref.a.scales[i], got.a.scales[i]) << k.name;
      ASSERT_EQ(ref.a.sums[i], got.a.sums[i]) << k.name;
    }
    std::vector<float> yr(size_t(c.M * c.N), -1.0f), yg(yr.size(), -2.0f);
    RefMatMulQ4(ref.a, w.m, 0, c.N, yr.data());
    // In two column ranges, split inside a 16-row group, as a caller splitting N may.
    const int64_t split = std::min<int64_t>(c.N, 16 * ((c.N / 2 + 15) / 16));
    k.matmul(got.a, w.m, 0, split, yg.data());
    k.matmul(got.a, w.m, split, c.N, yg.data());
    for (size_t i = 0; i < yr.size(); ++i) {
      ASSERT_EQ(yr[i], yg[i]) << k.name << " M=" << c.M << " K=" << c.K << " N=" << c.N << " at "
                              << i;
    }
  }
}

// The largest int32 group sums the kernels can meet: every code 15 (all nibbles set) against
// activations of +127 everywhere and of −127 everywhere. The AVX2 kernel adds u8 × s8 products in
// int16 over a whole group (at most 8 · 2 · 15 · 127 = 30480 in a lane), so this is where an
// overflow would show.
TEST(Q4Test, EveryVariantsKernelsAreExactAtExtremeCodes) {
  for (const KernelVariant* v : SupportedVariants()) {
    const Q4Kernels& k = Q4KernelsFor(*v);
    for (const Case& c : {Case{1, 256, 40}, Case{4, 128, 33}, Case{5, 64, 17}}) {
      Q4Weights w(c.N, c.K, 31);
      std::fill_n(w.buf, Q4Bytes(c.N, c.K), uint8_t{0xff});  // codes 15, d = m = F16 NaN bits
      // Real scales (1 and 0) so the products stay finite: d = 1.0 (0x3c00), m = 0.
      for (int64_t b = 0; b < Q4RowGroups(c.N) * Q4Groups(c.K); ++b) {
        auto* h = reinterpret_cast<uint16_t*>(w.buf + b * kQ4BlockBytes + kQ4ScalesOffset);
        for (int r = 0; r < 16; ++r) h[r] = 0x3c00, h[16 + r] = 0;
      }
      for (const float sign : {1.0f, -1.0f}) {
        const std::vector<float> x(size_t(c.M * c.K), sign);
        Q4Input a(c.M, c.K);
        k.quantize(x.data(), 0, c.M, a.a);
        ASSERT_EQ(a.a.q[0], sign > 0 ? 127 : -127) << k.name;
        std::vector<float> yr(size_t(c.M * c.N)), yg(yr.size());
        RefMatMulQ4(a.a, w.m, 0, c.N, yr.data());
        k.matmul(a.a, w.m, 0, c.N, yg.data());
        for (size_t i = 0; i < yr.size(); ++i) {
          // Σ over K of 15 · ±127 · s, s = 1/127 rounded to f32.
          ASSERT_NEAR(yr[i], sign * 15.0f * static_cast<float>(c.K), 1e-3 * c.K) << k.name;
          ASSERT_EQ(yg[i], yr[i]) << k.name << " M=" << c.M << " at " << i;
        }
      }
    }
  }
}

TEST(Q4Test, EmulatedVnniKernelsEqualTheReferenceBitForBit) {
  ExpectEqualToReference(EmulatedAvx512VnniQ4Kernels());
}

TEST(Q4Test, EveryVariantsKernelsEqualTheReferenceBitForBit) {
  for (const KernelVariant* v : SupportedVariants()) ExpectEqualToReference(Q4KernelsFor(*v));
}

// Context::MatMul routes kQ4 weights to the variant's Q4 kernels over the pool (2 threads).
TEST(Q4Test, ContextMatMulEqualsTheReference) {
  for (const KernelVariant* v : SupportedVariants()) {
    const Context ctx(2, Precision::kInt4, v);
    for (const Case& c : {Case{1, 128, 300}, Case{20, 96, 77}}) {
      const Q4Weights w(c.N, c.K, 21);
      const std::vector<float> x = Random(size_t(c.M * c.K), 22);
      Q4Input in(c.M, c.K);
      QuantizeActivationsQ4(x.data(), 0, c.M, in.a);
      std::vector<float> want(size_t(c.M * c.N)), got(want.size());
      RefMatMulQ4(in.a, w.m, 0, c.N, want.data());
      ctx.MatMul(x.data(), c.M, c.K, w.m, got.data());
      EXPECT_EQ(want, got) << v->name;
    }
  }
}

}  // namespace
}  // namespace vls::kernels
