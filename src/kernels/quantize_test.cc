// The Q4 and Q6 weight quantizers (q4.h: SupportedQ4Quantizers, q6.h: SupportedQ6Quantizers)
// against the scalar QuantizeQ4Group and QuantizeQ6Group bit for bit: random groups over the
// whole f32 range (subnormals to near FLT_MAX, whose ranges overflow), constant, zero,
// one-signed, single-outlier and F16-grid groups, batch sizes that leave lanes empty, and whole
// matrices through QuantizeQ4With / QuantizeQ6With in row ranges. Also the Q8 weight quantizer
// (quant.h) against its definition with std::nearbyint, ties and subnormal scales included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"

namespace vls::kernels {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Groups of kQ4Group values, many kinds, `count` of them.
std::vector<float> EdgeGroups(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind_of(0, 11), exp_of(-149, 127), idx(0, kQ4Group - 1);
  std::vector<float> v(static_cast<size_t>(count * kQ4Group));
  for (int64_t g = 0; g < count; ++g) {
    float* x = v.data() + g * kQ4Group;
    const int kind = kind_of(rng);
    const float scale = std::ldexp(1.0f, exp_of(rng));  // 2^-149 (the least subnormal) .. 2^127
    for (int64_t i = 0; i < kQ4Group; ++i) x[i] = normal(rng) * scale;
    switch (kind) {
      case 0: std::fill_n(x, kQ4Group, 0.0f); break;  // zeros
      case 1: std::fill_n(x, kQ4Group, x[0]); break;  // constant
      case 2:
        for (int64_t i = 0; i < kQ4Group; ++i) x[i] = -std::fabs(x[i]);
        break;
      case 3:
        for (int64_t i = 0; i < kQ4Group; ++i) x[i] = std::fabs(x[i]);
        break;
      case 4:  // one outlier
        std::fill_n(x, kQ4Group, x[1] * 1e-3f);
        x[idx(rng)] = x[0];
        break;
      case 5:  // ±near FLT_MAX
        for (int64_t i = 0; i < kQ4Group; ++i) {
          x[i] = std::numeric_limits<float>::max() * (normal(rng) > 0 ? 0.9f : -0.9f);
        }
        break;
      case 6:  // an F16 grid
        for (int64_t i = 0; i < kQ4Group; ++i) x[i] = 0.25f * float(idx(rng) % 16) - 1.0f;
        break;
      case 7:  // a few subnormals
        for (int64_t i = 0; i < kQ4Group; ++i) x[i] = float(idx(rng) - 16) * 1e-45f;
        break;
      case 8:  // ±0 mixed with values
        for (int64_t i = 0; i < kQ4Group; i += 2) x[i] = (i % 4 == 0) ? 0.0f : -0.0f;
        break;
      case 9: std::fill_n(x, kQ4Group, -0.0f); break;
      default: break;  // plain normal
    }
  }
  return v;
}

TEST(Q4QuantizeTest, EveryQuantizerEqualsTheScalarGroupBitForBit) {
  constexpr int64_t kCount = 20000;
  const std::vector<float> v = EdgeGroups(kCount, 17);
  std::vector<uint16_t> rd(kCount), rm(kCount);
  std::vector<uint8_t> rq(kCount * kQ4Group);
  for (int64_t g = 0; g < kCount; ++g) {
    QuantizeQ4Group(v.data() + g * kQ4Group, &rd[size_t(g)], &rm[size_t(g)],
                    rq.data() + g * kQ4Group);
  }
  for (const Q4Quantizer* quantizer : SupportedQ4Quantizers()) {
    std::vector<uint16_t> d(kCount), m(kCount);
    std::vector<uint8_t> q(kCount * kQ4Group);
    // Batches of 1 .. 40 groups (lanes left empty, several vectors per call), pointers out of
    // order so that lanes do not read contiguous memory.
    int64_t g0 = 0;
    for (int64_t n = 1; g0 < kCount; n = n % 40 + 1) {
      const int64_t cnt = std::min(n, kCount - g0);
      std::vector<const float*> x(static_cast<size_t>(cnt));
      for (int64_t j = 0; j < cnt; ++j) x[size_t(j)] = v.data() + (g0 + cnt - 1 - j) * kQ4Group;
      std::vector<uint16_t> bd(static_cast<size_t>(cnt)), bm(static_cast<size_t>(cnt));
      std::vector<uint8_t> bq(static_cast<size_t>(cnt * kQ4Group));
      quantizer->groups(x.data(), cnt, bd.data(), bm.data(), bq.data());
      for (int64_t j = 0; j < cnt; ++j) {
        const int64_t g = g0 + cnt - 1 - j;
        d[size_t(g)] = bd[size_t(j)];
        m[size_t(g)] = bm[size_t(j)];
        std::copy_n(bq.data() + j * kQ4Group, kQ4Group, q.data() + g * kQ4Group);
      }
      g0 += cnt;
    }
    int64_t mismatches = 0;
    for (int64_t g = 0; g < kCount && mismatches < 5; ++g) {
      const bool same = d[size_t(g)] == rd[size_t(g)] && m[size_t(g)] == rm[size_t(g)] &&
                        std::equal(q.begin() + g * kQ4Group, q.begin() + (g + 1) * kQ4Group,
                                   rq.begin() + g * kQ4Group);
      if (!same) {
        ++mismatches;
        ADD_FAILURE() << quantizer->name << " group " << g << " first value "
                      << v[size_t(g * kQ4Group)] << " (bits " << Bits(v[size_t(g * kQ4Group)])
                      << "): d " << d[size_t(g)] << " vs " << rd[size_t(g)] << ", m "
                      << m[size_t(g)] << " vs " << rm[size_t(g)];
      }
    }
  }
}

TEST(Q4QuantizeTest, EveryQuantizerGivesTheSameMatrixBytes) {
  // 37 rows (a partial last row group), 3 groups a row (batches span rows), in three ranges.
  constexpr int64_t N = 37, K = 96;
  const std::vector<float> v = EdgeGroups(N * K / kQ4Group, 23);
  const Matrix src{DType::kF32, v.data(), N, K};
  std::vector<uint8_t> ref(size_t(Q4Bytes(N, K)), 0xAA);
  QuantizeQ4With(*SupportedQ4Quantizers().front(), src, 0, N, ref.data(), N, 0);
  for (const Q4Quantizer* quantizer : SupportedQ4Quantizers()) {
    std::vector<uint8_t> out(ref.size(), 0x55);
    QuantizeQ4With(*quantizer, src, 20, N, out.data(), N, 0);
    QuantizeQ4With(*quantizer, src, 3, 20, out.data(), N, 0);
    QuantizeQ4With(*quantizer, src, 0, 3, out.data(), N, 0);
    EXPECT_EQ(out, ref) << quantizer->name;
  }
  EXPECT_EQ(DefaultQ4Quantizer().name, SupportedQ4Quantizers().back()->name);
}

static_assert(kQ6Group == kQ4Group, "EdgeGroups makes groups of both formats");

TEST(Q6QuantizeTest, EveryQuantizerEqualsTheScalarGroupBitForBit) {
  constexpr int64_t kCount = 20000;
  const std::vector<float> v = EdgeGroups(kCount, 29);
  std::vector<uint16_t> rd(kCount);
  std::vector<uint8_t> ru(kCount * kQ6Group);
  for (int64_t g = 0; g < kCount; ++g) {
    QuantizeQ6Group(v.data() + g * kQ6Group, &rd[size_t(g)], ru.data() + g * kQ6Group);
  }
  for (const Q6Quantizer* quantizer : SupportedQ6Quantizers()) {
    // Batches of 1 .. 40 groups (lanes left empty, several vectors per call), pointers out of
    // order so that lanes do not read contiguous memory.
    int64_t mismatches = 0;
    for (int64_t g0 = 0, n = 1; g0 < kCount && mismatches < 5; g0 += n, n = n % 40 + 1) {
      const int64_t cnt = std::min(n, kCount - g0);
      std::vector<const float*> x(static_cast<size_t>(cnt));
      for (int64_t j = 0; j < cnt; ++j) x[size_t(j)] = v.data() + (g0 + cnt - 1 - j) * kQ6Group;
      std::vector<uint16_t> d(static_cast<size_t>(cnt));
      std::vector<uint8_t> u(static_cast<size_t>(cnt * kQ6Group));
      quantizer->groups(x.data(), cnt, d.data(), u.data());
      for (int64_t j = 0; j < cnt && mismatches < 5; ++j) {
        const int64_t g = g0 + cnt - 1 - j;
        const bool same = d[size_t(j)] == rd[size_t(g)] &&
                          std::equal(u.begin() + j * kQ6Group, u.begin() + (j + 1) * kQ6Group,
                                     ru.begin() + g * kQ6Group);
        if (!same) {
          ++mismatches;
          ADD_FAILURE() << quantizer->name << " group " << g << " first value "
                        << v[size_t(g * kQ6Group)] << " (bits " << Bits(v[size_t(g * kQ6Group)])
                        << "): d " << d[size_t(j)] << " vs " << rd[size_t(g)];
        }
      }
    }
  }
}

TEST(Q6QuantizeTest, EveryQuantizerGivesTheSameMatrixBytes) {
  // 37 rows (a partial last row group), 3 groups a row (batches span rows), in three ranges.
  constexpr int64_t N = 37, K = 96;
  const std::vector<float> v = EdgeGroups(N * K / kQ6Group, 31);
  const Matrix src{DType::kF32, v.data(), N, K};
  std::vector<uint8_t> ref(size_t(Q6Bytes(N, K)), 0xAA);
  QuantizeQ6With(*SupportedQ6Quantizers().front(), src, 0, N, ref.data(), N, 0);
  for (const Q6Quantizer* quantizer : SupportedQ6Quantizers()) {
    std::vector<uint8_t> out(ref.size(), 0x55);
    QuantizeQ6With(*quantizer, src, 20, N, out.data(), N, 0);
    QuantizeQ6With(*quantizer, src, 3, 20, out.data(), N, 0);
    QuantizeQ6With(*quantizer, src, 0, 3, out.data(), N, 0);
    EXPECT_EQ(out, ref) << quantizer->name;
  }
  EXPECT_EQ(DefaultQ6Quantizer().name, SupportedQ6Quantizers().back()->name);
}

void CheckQ8AgainstNearbyint(int64_t N, int64_t K) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp_of(-149, 120);
  std::vector<float> v(static_cast<size_t>(N * K));
  for (int64_t r = 0; r < N; ++r) {
    float* x = v.data() + r * K;
    const float scale = std::ldexp(1.0f, exp_of(rng));
    for (int64_t k = 0; k < K; ++k) x[k] = normal(rng) * scale;
    if (r % 4 == 0) {  // amax 127: scale 1, every x.5 a tie, both signs
      for (int64_t k = 0; k < K; ++k) x[k] = 0.5f * static_cast<float>(k % 32 - 16) + 0.5f;
      x[0] = x[32] = 127.0f;
      if (K > 64) x[64] = 127.0f;
    }
    if (r % 4 == 1) {  // subnormal amax: a scale that rounds to F16 zero, the smallest F16
      for (int64_t k = 0; k < K; ++k) x[k] = static_cast<float>(k % 9 - 4) * 1e-44f;
    }
  }
  Q8Layout l = Q8LayoutFor(N, K);
  std::vector<uint8_t> buf(static_cast<size_t>(l.bytes));
  QuantizeQ8(Matrix{DType::kF32, v.data(), N, K}, 0, N, buf.data());
  const auto* q = reinterpret_cast<const int8_t*>(buf.data() + l.q_offset);
  const auto* scales = reinterpret_cast<const uint16_t*>(buf.data() + l.scales_offset);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t k = K; k < 4 * l.steps; ++k) ASSERT_EQ(q[Q8WeightIndex(K, r, k)], 0) << K;
    for (int64_t b = 0; b < Q8Blocks(K); ++b) {
      float amax = 0.0f;
      for (int64_t k = b * kQ8Block; k < std::min(K, (b + 1) * kQ8Block); ++k) {
        amax = std::max(amax, std::fabs(v[size_t(r * K + k)]));
      }
      // F16, nearest; one step up from 0 or where the maximum would pass code 127.5; beyond
      // the largest F16 (65504) the codes saturate.
      uint16_t scale16 = F32ToF16(std::min(amax / 127.0f, 65504.0f));
      if (amax > 0.0f && scale16 < 0x7bff && (scale16 == 0 || amax / F16ToF32(scale16) > 127.5f)) {
        ++scale16;
      }
      const float scale = F16ToF32(scale16);
      ASSERT_EQ(scales[Q8BlockIndex(K, r, b)], scale16) << K << " " << r << " " << b;
      for (int64_t k = b * kQ8Block; k < std::min(K, (b + 1) * kQ8Block); ++k) {
        const float t = scale > 0.0f ? std::nearbyint(v[size_t(r * K + k)] / scale) : 0.0f;
        const auto code = static_cast<int8_t>(std::clamp(t, -127.0f, 127.0f));
        ASSERT_EQ(q[Q8WeightIndex(K, r, k)], code) << K << " " << r << " " << k;
      }
    }
  }
}

TEST(Q8QuantizeTest, CodesEqualNearbyintOfTheScaledValues) {
  // Two full blocks; and two full blocks, a short one of 6 and 2 padding columns.
  for (const int64_t K : {64, 70}) {
    CheckQ8AgainstNearbyint(40, K);
  }
}

}  // namespace
}  // namespace vls::kernels
