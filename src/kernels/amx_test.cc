// The AMX tile kernel (kernels/amx.h) against the scalar reference, bit for bit. Skipped where
// the CPU or the OS gives no AMX tiles; the AVX512-BF16 variants' entries, which route products
// of 16 rows and more here, are also run against the reference by kernels_q8_test.
#include "kernels/amx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"

namespace vls::kernels {
namespace {

using testing::Random;

// 64-byte aligned storage for weight buffers.
struct alignas(64) Line {
  uint8_t bytes[64];
};

struct Case {
  int64_t M, K, N;
};
// M: a short tile alone (8, 12), one tile (16), a tile and a short one of 1-15 rows (17, 21,
// 31, 33, 50), whole tiles (32, 64); K: one block, an odd block count (the kernels take blocks
// in pairs), the 30B-A3B widths (768, 2048); N: partial and several 16-row weight groups.
constexpr Case kCases[] = {{8, 64, 16},   {12, 96, 33},   {16, 32, 16},   {17, 64, 33},
                           {21, 64, 47},  {31, 96, 20},   {32, 768, 48},  {33, 160, 7},
                           {50, 256, 70}, {64, 2048, 40}, {16, 2048, 129}};

template <typename F>
void ForEachSplit(int64_t N, const F& f) {
  // One call, and two split inside a 16-row weight group as a caller splitting N may.
  f(0, N);
  const int64_t split = std::max<int64_t>(1, N / 2 - 3);
  f(0, split);
  f(split, N);
}

TEST(AmxTest, AppliesOnlyToProductsOfWholeTilesOfRowsAndBlocks) {
  Q8Activations x;
  x.Resize(kAmxMinRows - 1, 64);
  EXPECT_FALSE(AmxQ8Applies(x));
  x.Resize(kAmxMinRows, 65);
  EXPECT_FALSE(AmxQ8Applies(x));
  x.Resize(kAmxMinRows, 64);
  EXPECT_EQ(AmxQ8Applies(x), AmxAvailable());
}

TEST(AmxTest, Q8ProductsEqualTheReferenceBitForBit) {
  if (!AmxAvailable()) GTEST_SKIP() << "no AMX tiles on this CPU or OS";
  for (const Case& c : kCases) {
    std::vector<float> wv = Random(size_t(c.N * c.K), uint32_t(c.N + c.K), 0.05f);
    std::fill_n(wv.begin(), kQ8Block, 0.0f);  // a zero block
    const Q8Layout layout = Q8LayoutFor(c.N, c.K);
    std::vector<Line> buf(size_t(layout.bytes / 64));
    QuantizeQ8(Matrix{DType::kF32, wv.data(), c.N, c.K}, 0, c.N, buf.data());
    const Matrix w = Q8MatrixAt(buf.data(), c.N, c.K);
    std::vector<float> xv = Random(size_t(c.M * c.K), uint32_t(c.M));
    std::fill_n(xv.begin() + c.K, kQ8Block, 0.0f);  // a zero activation block in row 1
    Q8Activations x;
    x.Resize(c.M, c.K);
    QuantizeActivationsQ8(xv.data(), 0, c.M, &x);
    ASSERT_TRUE(AmxQ8Applies(x));
    std::vector<float> ref(size_t(c.M * c.N));
    ReferenceVariant().matmul_q8(x, w, 0, c.N, ref.data());
    std::vector<float> got(ref.size(), -1.0f);
    ForEachSplit(c.N, [&](int64_t n0, int64_t n1) { MatMulQ8Amx(x, w, n0, n1, got.data()); });
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got[i], ref[i]) << "M=" << c.M << " K=" << c.K << " N=" << c.N << " at " << i;
    }
  }
}

// The largest sums: every weight −127 against activations of ±127.
TEST(AmxTest, ProductsAreExactAtExtremeCodes) {
  if (!AmxAvailable()) GTEST_SKIP() << "no AMX tiles on this CPU or OS";
  constexpr int64_t M = 20, K = 256, N = 33;
  for (const float sign : {1.0f, -1.0f}) {
    const std::vector<float> xv(size_t(M * K), sign);
    std::vector<float> ref(size_t(M * N)), got(ref.size());
    const std::vector<float> wv(size_t(N * K), -1.0f);  // q = −127 everywhere
    const Q8Layout layout = Q8LayoutFor(N, K);
    std::vector<Line> buf8(size_t(layout.bytes / 64));
    QuantizeQ8(Matrix{DType::kF32, wv.data(), N, K}, 0, N, buf8.data());
    const Matrix w8 = Q8MatrixAt(buf8.data(), N, K);
    Q8Activations x8;
    x8.Resize(M, K);
    QuantizeActivationsQ8(xv.data(), 0, M, &x8);
    ReferenceVariant().matmul_q8(x8, w8, 0, N, ref.data());
    MatMulQ8Amx(x8, w8, 0, N, got.data());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(ref[i], -sign * K, 1e-3 * K);
      ASSERT_EQ(got[i], ref[i]) << "at " << i;
    }
  }
}

}  // namespace
}  // namespace vls::kernels
