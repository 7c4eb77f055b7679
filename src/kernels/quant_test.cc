// The Q8 blocked format: layout, weight quantizer round trip, activation quantizer.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

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
    EXPECT_EQ(l.blocks, (cols + 127) / 128);
    EXPECT_EQ(l.q_offset, 0);
    for (int64_t off : {l.scales_offset, l.sums_offset, l.bytes}) EXPECT_EQ(off % 64, 0);
    EXPECT_GE(l.scales_offset, rows * cols);
    EXPECT_GE(l.sums_offset - l.scales_offset, rows * l.blocks * 4);
    EXPECT_GE(l.bytes - l.sums_offset, rows * l.blocks * 4);
    const Matrix m = Q8MatrixAt(reinterpret_cast<const void*>(uintptr_t{4096}), rows, cols);
    EXPECT_EQ(m.format, MatrixFormat::kQ8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.scales), 4096 + uintptr_t(l.scales_offset));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.sums), 4096 + uintptr_t(l.sums_offset));
  }
}

TEST(QuantTest, RoundTripWithinHalfAScaleForEveryDTypeAndTail) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t K : {1, 77, 128, 130, 2049}) {
      const int64_t N = 5;
      std::vector<float> v = Random(size_t(N * K), 1);
      for (int64_t k = 0; k < std::min<int64_t>(K, 128); ++k)
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
        const auto* qr = static_cast<const int8_t*>(q.data) + n * K;
        for (int64_t b = 0; b < l.blocks; ++b) {
          const float scale = q.scales[n * l.blocks + b];
          int32_t sum = 0, qmax = 0;
          for (int64_t k = b * 128; k < std::min(K, (b + 1) * 128); ++k) {
            ASSERT_LE(std::abs(qr[k]), 127);
            // Plus the f32 rounding of w / scale and of q · scale.
            ASSERT_LE(std::fabs(d[size_t(k)] - w[size_t(k)]),
                      scale * 0.5000002f + 1.2e-7f * std::fabs(w[size_t(k)]))
                << DTypeName(dt) << " K=" << K << " at " << n << "," << k;
            sum += qr[k];
            qmax = std::max<int32_t>(qmax, std::abs(qr[k]));
          }
          EXPECT_EQ(sum, q.sums[n * l.blocks + b]);
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

TEST(QuantTest, StackedPartsEqualTheStackedMatrix) {
  const int64_t K = 130, N1 = 3, N2 = 4;
  const std::vector<float> v = Random(size_t((N1 + N2) * K), 3);
  const Q8Layout l = Q8LayoutFor(N1 + N2, K);
  Aligned whole(l.bytes), parts(l.bytes);
  std::memset(whole.p, 0, size_t(l.bytes));
  std::memset(parts.p, 0, size_t(l.bytes));
  QuantizeQ8(Matrix{DType::kF32, v.data(), N1 + N2, K}, 0, N1 + N2, whole.p);
  const Matrix top{DType::kF32, v.data(), N1, K}, bottom{DType::kF32, v.data() + N1 * K, N2, K};
  QuantizeQ8(top, 0, N1, parts.p, N1 + N2, 0);
  QuantizeQ8(bottom, 0, 2, parts.p, N1 + N2, N1);
  QuantizeQ8(bottom, 2, N2, parts.p, N1 + N2, N1);
  EXPECT_EQ(std::memcmp(whole.p, parts.p, size_t(l.bytes)), 0);
}

TEST(QuantTest, ActivationsWithinHalfAScaleAndInterleavedBy16Rows) {
  const int64_t M = 19, K = 130;
  std::vector<float> x = Random(size_t(M * K), 2);
  for (int64_t k = 0; k < 128; ++k) x[size_t(4 * K + k)] = 0.0f;
  Q8Activations a;
  a.Resize(M, K);
  QuantizeActivationsQ8(x.data(), 0, M, &a);
  InterleaveQ8Activations(0, 16, &a);
  InterleaveQ8Activations(16, M, &a);
  const int64_t steps = (K + 3) / 4;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      const float s = a.scales[size_t(m * 2 + k / 128)];
      const uint8_t u = a.q[size_t(m * K + k)];
      ASSERT_GE(u, 1);  // q in [-127, 127]
      ASSERT_LE(std::fabs((int(u) - 128) * s - x[size_t(m * K + k)]),
                s / 2 + 1e-6 * std::fabs(x[size_t(m * K + k)]));
      ASSERT_EQ(a.q16[size_t((((m / 16) * steps + k / 4) * 16 + m % 16) * 4 + k % 4)], u);
    }
    EXPECT_EQ(a.scales16[size_t(((m / 16) * 2 + 1) * 16 + m % 16)], a.scales[size_t(m * 2 + 1)]);
  }
  EXPECT_EQ(a.scales[size_t(4 * 2)], 0.0f);
  EXPECT_EQ(a.q[size_t(4 * K)], 128);
  // Padding past K and past M stays 0, so it adds nothing whatever the weights hold.
  EXPECT_EQ(a.q16[size_t(((0 * steps + 32) * 16 + 3) * 4 + 2)], 0);  // k = 130
  EXPECT_EQ(a.q16[size_t(((1 * steps + 0) * 16 + 5) * 4)], 0);       // m = 21
}

}  // namespace
}  // namespace vls::kernels
