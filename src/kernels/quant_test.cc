// The Q8 blocked format: layout, weight quantizer round trip, activation quantizer.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace vls::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// A 64-byte-aligned buffer, as the prepared-weights file provides.
struct Aligned {
  explicit Aligned(int64_t bytes)
      : p(static_cast<uint8_t*>(std::aligned_alloc(64, size_t(std::max<int64_t>(64, bytes))))) {}
  ~Aligned() { std::free(p); }
  uint8_t* p;
};

TEST(QuantTest, LayoutOffsetsAre64ByteAlignedAndCoverEveryPart) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 77}, {5, 130}, {2048, 6144}}) {
    const Q8Layout l = Q8LayoutFor(rows, cols);
    EXPECT_EQ(l.blocks, (cols + kQ8Block - 1) / kQ8Block);
    EXPECT_EQ(l.groups, (rows + 15) / 16);
    EXPECT_EQ(l.steps, (cols + 3) / 4);
    EXPECT_EQ(l.q_offset, 0);
    for (int64_t off : {l.scales_offset, l.bytes}) EXPECT_EQ(off % 64, 0);
    EXPECT_GE(l.scales_offset, l.groups * 16 * l.steps * 4);
    EXPECT_GE(l.bytes - l.scales_offset, l.groups * 16 * l.blocks * 2);
    // 34 bytes per 32 weights, as Q8_0, up to the padding to whole groups and 64 bytes.
    EXPECT_EQ(l.bytes, (l.groups * 16 * l.steps * 4 + 63) / 64 * 64 +
                           (l.groups * 16 * l.blocks * 2 + 63) / 64 * 64);
    // The last weight and block of the last row lie inside their parts.
    EXPECT_LT(Q8WeightIndex(cols, rows - 1, cols - 1), l.scales_offset);
    EXPECT_LT(Q8BlockIndex(cols, rows - 1, l.blocks - 1) * 2, l.bytes - l.scales_offset);
    const Matrix m = Q8MatrixAt(reinterpret_cast<const void*>(uintptr_t{4096}), rows, cols);
    EXPECT_EQ(m.format, MatrixFormat::kQ8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.scales), 4096 + uintptr_t(l.scales_offset));
  }
}

TEST(QuantTest, RoundTripWithinHalfAScaleForEveryDTypeAndTail) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t K : {1, 31, 32, 33, 77, 100, 128, 130, 2049}) {
      const int64_t N = 5;
      std::vector<float> v = Random(size_t(N * K), 1);
      for (int64_t k = 0; k < std::min<int64_t>(K, kQ8Block); ++k)
        v[size_t(2 * K + k)] = 0.0f;  // zero block
      v[size_t(3 * K)] = 50.0f;       // outlier
      HostTensor t = FromF32As(dt, {N, K}, v);
      const Matrix src{dt, t.data(), N, K};
      const Q8Layout l = Q8LayoutFor(N, K);
      Aligned buf(l.bytes);
      // Two row ranges, as a parallel preparation would run them.
      QuantizeQ8(src, 0, 2, buf.p);
      QuantizeQ8(src, 2, N, buf.p);
      const Matrix q = Q8MatrixAt(buf.p, N, K);
      std::vector<float> w(static_cast<size_t>(K)), d(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        LoadRow(src, n, w.data());
        LoadRow(q, n, d.data());
        const auto* qw = static_cast<const int8_t*>(q.data);
        for (int64_t b = 0; b < l.blocks; ++b) {
          const float scale = F16ToF32(q.scales[Q8BlockIndex(K, n, b)]);
          // The stored scale is max|w| / 127 rounded to F16.
          float amax = 0.0f;
          for (int64_t k = b * kQ8Block; k < std::min(K, (b + 1) * kQ8Block); ++k)
            amax = std::max(amax, std::fabs(w[size_t(k)]));
          EXPECT_EQ(q.scales[Q8BlockIndex(K, n, b)], F32ToF16(amax / 127.0f));
          int32_t qmax = 0;
          for (int64_t k = b * kQ8Block; k < std::min(K, (b + 1) * kQ8Block); ++k) {
            const int32_t qk = qw[Q8WeightIndex(K, n, k)];
            ASSERT_LE(std::abs(qk), 127);
            // Plus the f32 rounding of w / scale and of q · scale.
            ASSERT_LE(std::fabs(d[size_t(k)] - w[size_t(k)]),
                      scale * 0.5000002f + 1.2e-7f * std::fabs(w[size_t(k)]))
                << DTypeName(dt) << " K=" << K << " at " << n << "," << k;
            qmax = std::max<int32_t>(qmax, std::abs(qk));
          }
          if (n == 2 && b == 0) {
            EXPECT_EQ(scale, 0.0f);
            EXPECT_EQ(qmax, 0);
          } else {
            EXPECT_EQ(qmax, 127) << "the block maximum maps to ±127";
          }
        }
      }
    }
  }
}

// The F16 scale's range: a block whose scale is beyond the largest F16 keeps 65504 and
// saturates its codes at ±127 (no infinite scale); a scale in F16's subnormal range goes one
// step up where rounding down would clamp the maximum, and one that rounds to F16 zero becomes
// the smallest subnormal, so every value stays within half a step.
TEST(QuantTest, F16ScaleRangeEdges) {
  const int64_t K = 96;
  std::vector<float> v(size_t(K), 0.0f);
  for (int64_t k = 0; k < 32; ++k) v[size_t(k)] = (k % 2 == 0 ? 1.0f : -1.0f) * 2e7f;
  for (int64_t k = 32; k < 64; ++k) v[size_t(k)] = 1e-6f * float(k - 40);  // amax 2.3e-5
  for (int64_t k = 64; k < 96; ++k) v[size_t(k)] = 3e-7f;                  // scale < F16 min
  const Q8Layout l = Q8LayoutFor(1, K);
  Aligned buf(l.bytes);
  QuantizeQ8(Matrix{DType::kF32, v.data(), 1, K}, 0, 1, buf.p);
  const Matrix q = Q8MatrixAt(buf.p, 1, K);
  const auto* qw = static_cast<const int8_t*>(q.data);
  EXPECT_EQ(F16ToF32(q.scales[Q8BlockIndex(K, 0, 0)]), 65504.0f);
  for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(qw[Q8WeightIndex(K, 0, k)], k % 2 == 0 ? 127 : -127);
  // 2.3e-5 / 127 = 1.81e-7 rounds to 3 subnormal steps (1.79e-7), which would put the maximum
  // at code 128.6: the scale is 4 steps.
  EXPECT_EQ(q.scales[Q8BlockIndex(K, 0, 1)], 4);
  EXPECT_EQ(q.scales[Q8BlockIndex(K, 0, 2)], 1);  // 3e-7 / 127 rounds to F16 zero
  std::vector<float> d(static_cast<size_t>(K));
  LoadRow(q, 0, d.data());
  for (int64_t k = 32; k < 96; ++k) {
    const float step = F16ToF32(q.scales[Q8BlockIndex(K, 0, k / 32)]);
    EXPECT_LE(std::fabs(d[size_t(k)] - v[size_t(k)]), step * 0.5f * 1.0001f) << k;
  }
  EXPECT_EQ(qw[Q8WeightIndex(K, 0, 64)], 5);
}

// Blocks are kQ8Block = 32 columns (the Q8_0 granularity): an outlier coarsens only its own
// block's step. Columns 31 | 32 and 63 | 64 lie on either side of a boundary; the last block of
// 100 columns holds 4.
TEST(QuantTest, BlocksAre32ColumnsAndAnOutlierStaysInItsBlock) {
  EXPECT_EQ(kQ8Block, 32);
  EXPECT_EQ(Q8Blocks(31), 1);
  EXPECT_EQ(Q8Blocks(32), 1);
  EXPECT_EQ(Q8Blocks(33), 2);
  EXPECT_EQ(Q8Blocks(100), 4);
  EXPECT_EQ(Q8Blocks(130), 5);
  const int64_t K = 100;
  std::vector<float> v(size_t(K), 0.5f);
  v[31] = 100.0f;  // the last column of block 0
  v[64] = -8.0f;   // the first column of block 2
  v[99] = 2.0f;    // the last (short) block 3
  const Q8Layout l = Q8LayoutFor(1, K);
  Aligned buf(l.bytes);
  QuantizeQ8(Matrix{DType::kF32, v.data(), 1, K}, 0, 1, buf.p);
  const Matrix q = Q8MatrixAt(buf.p, 1, K);
  const float want[] = {100.0f, 0.5f, 8.0f, 2.0f};  // max|w| per block
  for (int64_t b = 0; b < 4; ++b)
    EXPECT_EQ(q.scales[Q8BlockIndex(K, 0, b)], F32ToF16(want[b] / 127.0f));
  // Block 1 (columns 32..63) holds only 0.5s (q = 127): the outliers beside it leave its step,
  // and its values come back as 127 times the F16 scale (within F16's relative 2⁻¹¹ of 0.5).
  std::vector<float> d(static_cast<size_t>(K));
  LoadRow(q, 0, d.data());
  for (int64_t k = 32; k < 64; ++k) {
    EXPECT_EQ(d[size_t(k)], 127.0f * F16ToF32(F32ToF16(0.5f / 127.0f))) << k;
    EXPECT_NEAR(d[size_t(k)], 0.5f, 0.5f / 2048) << k;
  }
  // The same boundaries for activations.
  Q8Activations a;
  a.Resize(1, K);
  QuantizeActivationsQ8(v.data(), 0, 1, &a);
  ASSERT_EQ(a.blocks, 4);
  for (int64_t b = 0; b < 4; ++b) EXPECT_EQ(a.scales[size_t(b)], want[b] / 127.0f);
  for (int64_t k = 32; k < 64; ++k) EXPECT_EQ(a.q[size_t(k)], 127) << k;
  EXPECT_EQ(a.zero_terms[1], -kQ8WeightFlip * 127 * 32);
  EXPECT_EQ(a.zero_terms[3],
            -kQ8WeightFlip * (127 + 3 * int32_t(std::nearbyint(0.5f * 127.0f / 2.0f))));
}

// Parts that start and end inside 16-row groups, each quantized in two row ranges, into buffers
// that start as garbage: every byte, padding included, equals the whole matrix quantized at once.
TEST(QuantTest, StackedPartsEqualTheStackedMatrix) {
  const int64_t K = 130, N1 = 19, N2 = 22;
  const std::vector<float> v = Random(size_t((N1 + N2) * K), 3);
  const Q8Layout l = Q8LayoutFor(N1 + N2, K);
  Aligned whole(l.bytes), parts(l.bytes);
  std::memset(whole.p, 0x5a, size_t(l.bytes));
  std::memset(parts.p, 0xa5, size_t(l.bytes));
  QuantizeQ8(Matrix{DType::kF32, v.data(), N1 + N2, K}, 0, N1 + N2, whole.p);
  const Matrix top{DType::kF32, v.data(), N1, K}, bottom{DType::kF32, v.data() + N1 * K, N2, K};
  QuantizeQ8(top, 0, 7, parts.p, N1 + N2, 0);
  QuantizeQ8(top, 7, N1, parts.p, N1 + N2, 0);
  QuantizeQ8(bottom, 0, 2, parts.p, N1 + N2, N1);
  QuantizeQ8(bottom, 2, N2, parts.p, N1 + N2, N1);
  // Bytes past the parts (alignment padding between them) are not the format's.
  const auto same = [&](int64_t off, int64_t n) {
    return std::memcmp(whole.p + off, parts.p + off, size_t(n)) == 0;
  };
  EXPECT_TRUE(same(l.q_offset, l.groups * l.steps * 64));
  EXPECT_TRUE(same(l.scales_offset, l.groups * l.blocks * 32));
  // Padding rows (41..47) and columns (130, 131) are 0.
  const auto* q = reinterpret_cast<const int8_t*>(parts.p);
  const auto* scales = reinterpret_cast<const uint16_t*>(parts.p + l.scales_offset);
  for (int64_t r = 0; r < l.groups * 16; ++r) {
    for (int64_t k = r < N1 + N2 ? K : 0; k < l.steps * 4; ++k) {
      ASSERT_EQ(q[Q8WeightIndex(K, r, k)], 0) << r << "," << k;
    }
    if (r >= N1 + N2) {
      for (int64_t b = 0; b < l.blocks; ++b) EXPECT_EQ(scales[Q8BlockIndex(K, r, b)], 0);
    }
  }
}

TEST(QuantTest, ActivationsWithinHalfAScale) {
  const int64_t M = 19, K = 130, nb = Q8Blocks(K);
  std::vector<float> x = Random(size_t(M * K), 2);
  for (int64_t k = 0; k < kQ8Block; ++k) x[size_t(4 * K + k)] = 0.0f;
  Q8Activations a;
  a.Resize(M, K);
  EXPECT_GE(a.q.size(), size_t(M * K + kQ8ActivationSlack));
  QuantizeActivationsQ8(x.data(), 0, M, &a);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      const float s = a.scales[size_t(m * nb + k / kQ8Block)];
      const int8_t q = a.q[size_t(m * K + k)];
      ASSERT_GE(q, -127);
      ASSERT_LE(std::fabs(q * s - x[size_t(m * K + k)]),
                s / 2 + 1e-6 * std::fabs(x[size_t(m * K + k)]));
    }
    for (int64_t b = 0; b < nb; ++b) {
      int32_t sum = 0;
      for (int64_t k = b * kQ8Block; k < std::min(K, (b + 1) * kQ8Block); ++k)
        sum += a.q[size_t(m * K + k)];
      ASSERT_EQ(a.zero_terms[size_t(m * nb + b)], -kQ8WeightFlip * sum) << m << "," << b;
    }
  }
  EXPECT_EQ(a.scales[size_t(4 * nb)], 0.0f);
  EXPECT_EQ(a.q[size_t(4 * K)], 0);
}

}  // namespace
}  // namespace vls::kernels
