#include "kernels/q6.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/quantizer_choice.h"
#include "tensor/dtype.h"

namespace vls::kernels {

// quantize_avx512.cc, quantize_avx2.cc (x86-64 builds; called only on CPUs with them).
void QuantizeQ6GroupsAvx512(const float* const* x, int64_t n, uint16_t* d, uint8_t* u);
void QuantizeQ6GroupsAvx2(const float* const* x, int64_t n, uint16_t* d, uint8_t* u);

namespace {

// Round to nearest even of v clamped to [-31, 31] (ggml's nearest_int: adding 1.5 · 2²³ leaves
// the rounded value in the low mantissa bits, negative ones too), without std::nearbyint's
// library call on baseline x86-64.
int RoundCode(float v) {
  const float f =
      std::clamp(v, -static_cast<float>(kQ6MaxCode), static_cast<float>(kQ6MaxCode)) + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace

Matrix Q6MatrixAt(const void* base, int64_t rows, int64_t cols) {
  Matrix m;
  m.data = base;
  m.rows = rows;
  m.cols = cols;
  m.format = MatrixFormat::kQ6;
  return m;
}

int Q6Code(const Matrix& w, int64_t r, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w.data) + Q6BlockOffset(w.cols, r, k);
  const uint8_t low = b[Q6LowOffset(r, k)];
  const int lo = (k % kQ6Group) >= 16 ? low >> 4 : low & 15;
  const int hi = (b[Q6HighOffset(r, k)] >> (2 * ((k % 16) / 4))) & 3;
  return lo | (hi << 4);
}

float Q6Scale(const Matrix& w, int64_t r, int64_t group) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(w.data) + Q6ScaleOffset(w.rows, w.cols, r, group), 2);
  return F16ToF32(h);
}

// Candidate inverse scales around 31 / amax (ggml's make_qx_quants sweep, 19 steps of 0.1):
// each codes the group, the least-squares d of those codes (weighted by Q4_K's importance
// |x| + rms(x), as the Q4 quantizer) follows, and the fit of least weighted error wins. d is
// then rounded to F16 and every value coded again against it.
void QuantizeQ6Group(const float* x, uint16_t* dh, uint8_t* u) {
  constexpr int64_t n = kQ6Group;
  float amax = 0.0f, sum_x2 = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    sum_x2 += x[i] * x[i];
  }
  float d = 0.0f;
  if (amax > 0.0f) {
    const float av = std::sqrt(sum_x2 / static_cast<float>(n));
    float w[n];
    for (int64_t i = 0; i < n; ++i) w[i] = av + std::fabs(x[i]);
    float best = INFINITY;
    for (int is = -9; is <= 9; ++is) {
      const float iscale = (static_cast<float>(kQ6MaxCode) + 0.1f * static_cast<float>(is)) / amax;
      float sxl = 0.0f, sl2 = 0.0f;
      int l[n];
      for (int64_t i = 0; i < n; ++i) {
        l[i] = RoundCode(x[i] * iscale);
        const auto li = static_cast<float>(l[i]);
        sxl += w[i] * x[i] * li;
        sl2 += w[i] * li * li;
      }
      if (!(sl2 > 0.0f) || !(sxl > 0.0f)) continue;
      const float td = sxl / sl2;
      float err = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float e = td * static_cast<float>(l[i]) - x[i];
        err += w[i] * e * e;
      }
      if (err < best) {
        best = err;
        d = td;
      }
    }
  }
  *dh = F32ToF16(d);
  const float dd = F16ToF32(*dh);
  for (int64_t i = 0; i < n; ++i) {
    u[i] = static_cast<uint8_t>((dd > 0.0f ? RoundCode(x[i] / dd) : 0) + kQ6Zero);
  }
}

void RefQuantizeQ6Groups(const float* const* x, int64_t n, uint16_t* d, uint8_t* u) {
  for (int64_t j = 0; j < n; ++j) QuantizeQ6Group(x[j], d + j, u + j * kQ6Group);
}

std::vector<const Q6Quantizer*> SupportedQ6Quantizers() {
  static const Q6Quantizer reference = {"reference", RefQuantizeQ6Groups};
  std::vector<const Q6Quantizer*> all = {&reference};
#if defined(__x86_64__)
  static const Q6Quantizer avx2 = {"avx2", QuantizeQ6GroupsAvx2};
  static const Q6Quantizer avx512 = {"avx512", QuantizeQ6GroupsAvx512};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) all.push_back(&avx2);
  if (__builtin_cpu_supports("avx512f")) all.push_back(&avx512);
#endif
  return all;
}

const Q6Quantizer& DefaultQ6Quantizer() {
  static const Q6Quantizer* const q = ChooseQuantizer(SupportedQ6Quantizers(), "VLS_Q6_QUANTIZER");
  return *q;
}

void QuantizeQ6(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row) {
  QuantizeQ6With(DefaultQ6Quantizer(), src, r0, r1, dst, dst_rows, dst_row);
}

void QuantizeQ6With(const Q6Quantizer& quantizer, const Matrix& src, int64_t r0, int64_t r1,
                    void* dst, int64_t dst_rows, int64_t dst_row) {
  const int64_t K = src.cols, groups = Q6Groups(K);
  auto* base = static_cast<uint8_t*>(dst);
  // Writes row d's group g. The rows of a block share bytes of the high-bit vectors only
  // through distinct bit pairs of distinct bytes (byte 4r + c belongs to row r), so rows are
  // independent.
  auto put = [&](int64_t d, int64_t g, uint16_t dh, const uint8_t* u) {
    uint8_t* b = base + Q6BlockOffset(K, d, g * kQ6Group);
    for (int64_t i = 0; i < 16; ++i) {
      b[Q6LowOffset(d, i)] = static_cast<uint8_t>((u[i] & 15) | ((u[i + 16] & 15) << 4));
    }
    for (int64_t k = 0; k < 16; ++k) {  // the 4 bytes (c) × 2 vectors (h) of row d
      uint8_t* hb0 = b + Q6HighOffset(d, k);
      uint8_t* hb1 = b + Q6HighOffset(d, k + 16);
      const int shift = 2 * static_cast<int>(k / 4);
      if (k < 4) {  // the first of the 4 bit pairs of each byte clears it
        *hb0 = 0;
        *hb1 = 0;
      }
      *hb0 = static_cast<uint8_t>(*hb0 | ((u[k] >> 4) << shift));
      *hb1 = static_cast<uint8_t>(*hb1 | ((u[k + 16] >> 4) << shift));
    }
    std::memcpy(base + Q6ScaleOffset(dst_rows, K, d, g), &dh, 2);
  };
  // Rows in chunks of kQ6Rows, their groups handed to the quantizer kBatch at a time (so a
  // SIMD quantizer's lanes stay full whatever the row's group count), as QuantizeQ4With.
  constexpr int64_t kBatch = 64;
  std::vector<float> rows(static_cast<size_t>(kQ6Rows * K));  // [kQ6Rows, K]
  const float* x[kBatch];
  uint16_t dh[kBatch];
  uint8_t u[kBatch * kQ6Group];
  for (int64_t c0 = r0; c0 < r1; c0 += kQ6Rows) {
    const int64_t c1 = std::min(r1, c0 + kQ6Rows), total = (c1 - c0) * groups;
    for (int64_t r = c0; r < c1; ++r) LoadRow(src, r, rows.data() + (r - c0) * K);
    for (int64_t f0 = 0; f0 < total; f0 += kBatch) {
      const int64_t n = std::min(kBatch, total - f0);
      for (int64_t j = 0; j < n; ++j) x[j] = rows.data() + (f0 + j) * kQ6Group;
      quantizer.groups(x, n, dh, u);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t f = f0 + j;
        put(dst_row + c0 + f / groups, f % groups, dh[j], u + j * kQ6Group);
      }
    }
  }
  // The padding rows of the last row group and the scales' tail, written with the last row.
  if (r1 > r0 && dst_row + r1 == dst_rows) {
    const uint8_t zeros[kQ6Group] = {};
    for (int64_t p = dst_rows; p < Q6RowGroups(dst_rows) * kQ6Rows; ++p) {
      for (int64_t g = 0; g < groups; ++g) put(p, g, 0, zeros);
    }
    const int64_t used = Q6ScalesOffset(dst_rows, K) + Q6RowGroups(dst_rows) * groups * 32;
    std::memset(base + used, 0, static_cast<size_t>(Q6Bytes(dst_rows, K) - used));
  }
}

void RefMatMulQ6(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const int64_t M = x.rows, K = x.cols, N = w.rows, ng = x.groups;
  // One weight row's codes and scales, decoded once for all M rows.
  std::vector<int32_t> u(static_cast<size_t>(K));
  std::vector<float> d(static_cast<size_t>(ng));
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t k = 0; k < K; ++k) u[size_t(k)] = Q6Code(w, n, k);
    for (int64_t g = 0; g < ng; ++g) d[size_t(g)] = Q6Scale(w, n, g);
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0.0f;
      for (int64_t g = 0; g < ng; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * kQ6Group; k < (g + 1) * kQ6Group; ++k) {
          dot += int32_t{x.q[m * K + k]} * u[size_t(k)];
        }
        dot -= kQ6Zero * static_cast<int32_t>(x.sums[m * ng + g]);
        const float t = static_cast<float>(dot) * d[size_t(g)];
        acc = std::fma(t, x.scales[m * ng + g], acc);
      }
      y[m * N + n] = acc;
    }
  }
}

}  // namespace vls::kernels
