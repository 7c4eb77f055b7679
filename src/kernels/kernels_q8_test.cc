// The Q8 kernels of every supported variant against the scalar reference, and the Q8 path of
// Context::MatMul against an f32 matmul of the dequantized weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant.h"

namespace vls::kernels {
namespace {

struct Case {
  int64_t M, K, N;
};
// K (kQ8Block = 32): one column, tails of 1-3 columns past a multiple of 4, one block less or
// more than a column (31, 33), a short last block (33, 77, 100, 130, 1000, 2049), exact blocks
// (32, 96, 128, 256, ...); N odd (partial 16-row weight groups), several chunks of groups; M:
// every decode tile shape (1, 2, 3 rows), the one-group tiles of 7-10 rows (M 7, 8, 9, 10) and
// prefill tiles of balanced heights 3-6 (M 13, 17, 19, 33, 50: 5+4+4, 6+6+5, 5+5+5+4,
// 6+6+6+5+5+5, 5·6 + 4·5); three row tiles or more over several chunks, the last one short,
// whose later passes prefetch the next chunk (M 16 and 40, N 150 and 300).
constexpr Case kCases[] = {
    {1, 1, 1},     {1, 77, 5},    {3, 130, 33},   {17, 77, 31},   {3, 512, 41},  {17, 1000, 7},
    {8, 2049, 65}, {1, 2049, 17}, {5, 131, 19},   {50, 258, 37},  {33, 128, 9},  {2, 384, 50},
    {8, 256, 300}, {7, 130, 47},  {16, 96, 33},   {13, 1024, 70}, {4, 33, 20},   {9, 100, 18},
    {2, 31, 17},   {1, 32, 16},   {19, 64, 35},   {1, 100, 64},   {14, 33, 3},   {1, 2049, 200},
    {2, 130, 97},  {3, 64, 131},  {16, 300, 150}, {40, 77, 300},  {10, 300, 40}, {11, 64, 20}};

std::vector<float> Random(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// Q8 weights prepared from random f32 values, with one zero block when the shape has room.
struct Q8Weights {
  Q8Weights(int64_t N, int64_t K, uint32_t seed) : layout(Q8LayoutFor(N, K)) {
    std::vector<float> v = Random(size_t(N * K), seed, 0.05f);
    if (N > 2) std::fill_n(v.begin() + 2 * K, std::min<int64_t>(K, kQ8Block), 0.0f);
    buf = static_cast<uint8_t*>(std::aligned_alloc(64, size_t(layout.bytes)));
    QuantizeQ8(Matrix{DType::kF32, v.data(), N, K}, 0, N, buf);
    m = Q8MatrixAt(buf, N, K);
  }
  ~Q8Weights() { std::free(buf); }
  Q8Layout layout;
  uint8_t* buf;
  Matrix m;
};

Q8Activations Quantized(const KernelVariant& v, const std::vector<float>& x, int64_t M, int64_t K) {
  Q8Activations a;
  a.Resize(M, K);
  v.quantize_q8(x.data(), 0, M, &a);
  return a;
}

TEST(KernelsQ8Test, EveryVariantQuantizesActivationsLikeTheReference) {
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->quantize_q8 == nullptr) continue;
    for (const Case& c : kCases) {
      std::vector<float> x = Random(size_t(c.M * c.K), 1);
      if (c.K >= kQ8Block) std::fill_n(x.begin(), kQ8Block, 0.0f);  // a zero block
      const Q8Activations ref = Quantized(ReferenceVariant(), x, c.M, c.K);
      const Q8Activations got = Quantized(*v, x, c.M, c.K);
      EXPECT_EQ(got.q, ref.q) << v->name << " M=" << c.M << " K=" << c.K;
      EXPECT_EQ(got.scales, ref.scales) << v->name << " M=" << c.M << " K=" << c.K;
      EXPECT_EQ(got.zero_terms, ref.zero_terms) << v->name << " M=" << c.M << " K=" << c.K;
    }
  }
}

// Blocks where rounding at the edges matters: amax over a wide range of exponents (down to
// subnormals, where 127 / amax would overflow: kQ8MinActivationAmax), the extremes ±amax, their
// neighbours one ulp inside, values that land on .5 after scaling. The vector kernels skip the
// reference's ±127 clamp (|x · fl(127 / amax)| never rounds past 127); this pins that down.
TEST(KernelsQ8Test, EveryVariantQuantizesEdgeBlocksLikeTheReference) {
  constexpr int64_t B = kQ8Block, M = 64, K = 3 * 128;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-140, 120);
  std::vector<float> x(size_t(M * K));
  for (int64_t b = 0; b < M * K / B; ++b) {
    float* blk = x.data() + b * B;
    const float amax = std::ldexp(1.0f + 0.5f * std::abs(u(rng)), e(rng));
    for (int64_t i = 0; i < B; ++i) blk[i] = amax * u(rng);
    blk[0] = amax;
    blk[1] = -amax;
    blk[2] = std::nextafter(amax, 0.0f);
    blk[3] = -std::nextafter(amax, 0.0f);
    for (int64_t i = 4; i < 20; ++i) blk[i] = (static_cast<float>(i) - 3.5f) * amax / 127.0f;
  }
  const Q8Activations ref = Quantized(ReferenceVariant(), x, M, K);
  int tiny = 0;
  for (int64_t b = 0; b < M * K / B; ++b) {
    if (std::abs(x[size_t(b * B)]) >= kQ8MinActivationAmax) continue;
    ++tiny;
    EXPECT_EQ(ref.scales[size_t(b)], 0.0f) << "block " << b;
    EXPECT_EQ(ref.zero_terms[size_t(b)], 0) << "block " << b;
    for (int64_t i = 0; i < B; ++i) ASSERT_EQ(ref.q[size_t(b * B + i)], 0) << "block " << b;
  }
  EXPECT_GT(tiny, 0);
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->quantize_q8 == nullptr) continue;
    const Q8Activations got = Quantized(*v, x, M, K);
    EXPECT_EQ(got.q, ref.q) << v->name;
    EXPECT_EQ(got.scales, ref.scales) << v->name;
    EXPECT_EQ(got.zero_terms, ref.zero_terms) << v->name;
  }
}

// The Q8 matmuls of a variant: matmul_q8 and, where it has one, matmul_q8_four_streams.
std::vector<std::pair<const char*, decltype(KernelVariant::matmul_q8)>> Q8MatMuls(
    const KernelVariant& v) {
  std::vector<std::pair<const char*, decltype(KernelVariant::matmul_q8)>> out;
  if (v.matmul_q8 != nullptr) out.emplace_back("matmul_q8", v.matmul_q8);
  if (v.matmul_q8_four_streams != nullptr) {
    out.emplace_back("matmul_q8_four_streams", v.matmul_q8_four_streams);
  }
  return out;
}

TEST(KernelsQ8Test, EveryVariantMatMulQ8EqualsTheReferenceExactly) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (const auto& [name, matmul] : Q8MatMuls(*v)) {
      for (const Case& c : kCases) {
        const Q8Weights w(c.N, c.K, 2);
        const Q8Activations a =
            Quantized(ReferenceVariant(), Random(size_t(c.M * c.K), 3), c.M, c.K);
        std::vector<float> ref(size_t(c.M * c.N), -1.0f), got(size_t(c.M * c.N), -2.0f);
        ReferenceVariant().matmul_q8(a, w.m, 0, c.N, ref.data());
        // Two calls over a split of N, as the thread pool does (mid not always on a 64-column
        // boundary: a four-stream tile then starts inside a group of 4).
        const int64_t mid = c.N / 2;
        matmul(a, w.m, 0, mid, got.data());
        matmul(a, w.m, mid, c.N, got.data());
        // Integer block sums are exact and the f32 steps are the same operations in the same
        // order.
        ASSERT_EQ(got, ref) << v->name << " " << name << " M=" << c.M << " K=" << c.K
                            << " N=" << c.N;
      }
    }
  }
}

// Every code at ±127 on both sides, the signs arranged so that adjacent products agree: the
// largest block dot products (±127² · 32) and the largest pairs of products a 16-bit multiply-add
// (AVX2 vpmaddubsw, which saturates at ±32767) can meet, and the AVX512-VNNI kernel's u8
// weights (qw + 128) at 1 and 255.
// Row patterns: all +1, all −1, signs alternating by pairs of columns, signs by column mod 3.
TEST(KernelsQ8Test, EveryVariantMatMulQ8IsExactAtExtremeCodes) {
  const auto sign = [](int64_t pattern, int64_t k) {
    switch (pattern % 4) {
      case 0: return 1.0f;
      case 1: return -1.0f;
      case 2: return (k / 2) % 2 == 0 ? 1.0f : -1.0f;
      default: return k % 3 == 0 ? -1.0f : 1.0f;
    }
  };
  for (const Case& c : {Case{1, 96, 35}, Case{2, 100, 20}, Case{3, 64, 33}, Case{4, 256, 16},
                        Case{9, 130, 37}, Case{20, 1024, 48}}) {
    std::vector<float> x(size_t(c.M * c.K)), wf(size_t(c.N * c.K));
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t k = 0; k < c.K; ++k) x[size_t(m * c.K + k)] = sign(m, k);
    }
    for (int64_t n = 0; n < c.N; ++n) {
      for (int64_t k = 0; k < c.K; ++k) wf[size_t(n * c.K + k)] = 0.5f * sign(n / 4 + n, k);
    }
    const Q8Layout layout = Q8LayoutFor(c.N, c.K);
    std::vector<uint8_t> buf(size_t(layout.bytes));
    QuantizeQ8(Matrix{DType::kF32, wf.data(), c.N, c.K}, 0, c.N, buf.data());
    const Matrix w = Q8MatrixAt(buf.data(), c.N, c.K);
    const Q8Activations a = Quantized(ReferenceVariant(), x, c.M, c.K);
    std::vector<float> ref(size_t(c.M * c.N));
    ReferenceVariant().matmul_q8(a, w, 0, c.N, ref.data());
    // The codes are ±127, so the reference is Σ x · w' (w' the weights as stored: ±127 times
    // the F16 scale) up to f32 rounding.
    ASSERT_TRUE(a.q[0] == 127 && (c.M < 2 || a.q[size_t(c.K)] == -127));
    std::vector<float> wd(size_t(c.K));
    for (int64_t n = 0; n < c.N; ++n) {
      LoadRow(w, n, wd.data());
      for (int64_t k = 0; k < c.K; ++k) ASSERT_EQ(std::fabs(wd[size_t(k)]), std::fabs(wd[0]));
      for (int64_t m = 0; m < c.M; ++m) {
        double exact = 0;
        for (int64_t k = 0; k < c.K; ++k) exact += double(x[size_t(m * c.K + k)]) * wd[size_t(k)];
        ASSERT_NEAR(ref[size_t(m * c.N + n)], exact, 1e-5 * double(c.K)) << m << "," << n;
      }
    }
    for (const KernelVariant* v : SupportedVariants()) {
      for (const auto& [name, matmul] : Q8MatMuls(*v)) {
        std::vector<float> got(size_t(c.M * c.N), -2.0f);
        matmul(a, w, 0, c.N, got.data());
        ASSERT_EQ(got, ref) << v->name << " " << name << " M=" << c.M << " K=" << c.K
                            << " N=" << c.N;
      }
    }
  }
}

// y_q8 = Σ_k x'_k · w'_k with w' the dequantized weights and x' = qx · sx the
// dequantized activations, up to f32 rounding. |x' − x| ≤ sx/2 per element (plus the rounding of
// 127/amax, ≤ 2⁻²² |x|), so |y_q8 − Σ x · w'| ≤ Σ_b (sx_b / 2) · Σ_{k∈b} |w'_k| + 2⁻²² Σ|x·w'|;
// the f32 sums on both sides add at most K·2⁻²⁴ of Σ|x·w'| each (sequential worst case).
TEST(KernelsQ8Test, ContextMatMulQ8StaysWithinActivationRoundingOfDequantizedF32) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (const Case& c : kCases) {
      const Q8Weights w(c.N, c.K, 4);
      const std::vector<float> x = Random(size_t(c.M * c.K), 5);
      std::vector<float> wf(size_t(c.N * c.K));
      for (int64_t n = 0; n < c.N; ++n) LoadRow(w.m, n, &wf[size_t(n * c.K)]);
      std::vector<float> ref(size_t(c.M * c.N)), got(size_t(c.M * c.N));
      MatMulTransposed(x.data(), c.M, c.K, Matrix{DType::kF32, wf.data(), c.N, c.K}, ref.data());
      const Context ctx(3, Precision::kInt8, v);
      ctx.MatMul(x.data(), c.M, c.K, w.m, got.data());
      const Q8Activations a = Quantized(ReferenceVariant(), x, c.M, c.K);
      const int64_t nb = Q8Blocks(c.K);
      for (int64_t m = 0; m < c.M; ++m) {
        for (int64_t n = 0; n < c.N; ++n) {
          double quant = 0, abs_sum = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const double aw = std::fabs(wf[size_t(n * c.K + k)]);
            quant += a.scales[size_t(m * nb + k / kQ8Block)] / 2 * aw;
            abs_sum += std::fabs(x[size_t(m * c.K + k)]) * aw;
          }
          const double tol = quant + abs_sum * (2.5e-7 + 2.0 * double(c.K) * 6e-8) + 1e-30;
          ASSERT_NEAR(got[size_t(m * c.N + n)], ref[size_t(m * c.N + n)], tol)
              << v->name << " M=" << c.M << " K=" << c.K << " N=" << c.N << " at " << m << "," << n;
          // The bound is a few percent of Σ|x·w| (8-bit activations), not a vacuous one.
          ASSERT_LE(tol, 0.03 * abs_sum + 1e-30);
        }
      }
    }
  }
}

TEST(KernelsQ8Test, ContextMatMulQ8IsTheSameUnderEveryPrecisionAndThreadCount) {
  const Case c{37, 300, 67};
  const Q8Weights w(c.N, c.K, 6);
  const std::vector<float> x = Random(size_t(c.M * c.K), 7);
  const Q8Activations a = Quantized(ReferenceVariant(), x, c.M, c.K);
  std::vector<float> ref(size_t(c.M * c.N));
  ReferenceVariant().matmul_q8(a, w.m, 0, c.N, ref.data());
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kInt8}) {
      for (int threads : {1, 2, 3}) {
        std::vector<float> got(size_t(c.M * c.N));
        Context(threads, p, v).MatMul(x.data(), c.M, c.K, w.m, got.data());
        EXPECT_EQ(got, ref) << v->name << " " << PrecisionName(p) << " threads=" << threads;
      }
    }
  }
}

}  // namespace
}  // namespace vls::kernels
