#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace vls::kernels {

namespace {

constexpr int64_t AlignUp64(int64_t n) { return (n + 63) / 64 * 64; }

// std::nearbyint(v) in the default rounding mode (to nearest even) for |v| < 2²², without its
// library call on baseline x86-64: v + 1.5 · 2²³ lies in [2²³, 2²⁴), whose spacing is 1, so
// the sum rounds v to an integer and the subtraction is exact. (-0.0 for a small negative v
// becomes +0.0; the callers only convert the result to an integer.)
float RoundToNearestEven(float v) { return (v + 12582912.0f) - 12582912.0f; }

// The largest finite F16: a block whose max|w| / 127 is beyond it (|w| above about 8.3e6) keeps
// this scale and saturates its codes at ±127 rather than storing an infinite scale.
constexpr float kF16Max = 65504.0f;

}  // namespace

Q8Layout Q8LayoutFor(int64_t rows, int64_t cols) {
  Q8Layout l;
  l.rows = rows;
  l.cols = cols;
  l.blocks = Q8Blocks(cols);
  l.groups = Q8Groups(rows);
  l.steps = Q8Steps(cols);
  l.q_offset = 0;
  l.scales_offset = AlignUp64(l.groups * l.steps * kQ8Group * 4);
  l.bytes = l.scales_offset + AlignUp64(l.groups * l.blocks * kQ8Group * 2);  // F16 scales
  return l;
}

Matrix Q8MatrixAt(const void* base, int64_t rows, int64_t cols) {
  const Q8Layout l = Q8LayoutFor(rows, cols);
  const auto* b = static_cast<const uint8_t*>(base);
  Matrix m;
  m.data = b + l.q_offset;
  m.rows = rows;
  m.cols = cols;
  m.format = MatrixFormat::kQ8;
  m.scales = reinterpret_cast<const uint16_t*>(b + l.scales_offset);
  return m;
}

void QuantizeQ8(const Matrix& src, int64_t r0, int64_t r1, void* dst) {
  QuantizeQ8(src, r0, r1, dst, src.rows, 0);
}

void QuantizeQ8(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row) {
  const Q8Layout l = Q8LayoutFor(dst_rows, src.cols);
  auto* b = static_cast<uint8_t*>(dst);
  auto* q = reinterpret_cast<int8_t*>(b + l.q_offset);
  auto* scales = reinterpret_cast<uint16_t*>(b + l.scales_offset);
  const int64_t K = src.cols;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = r0; r < r1; ++r) {
    LoadRow(src, r, row.data());
    const int64_t d = dst_row + r;  // the row in dst
    for (int64_t blk = 0; blk < l.blocks; ++blk) {
      const int64_t k0 = blk * kQ8Block, n = std::min(K, k0 + kQ8Block) - k0;
      const float* x = row.data() + k0;
      float amax = 0.0f;
      for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
      // The scale as stored: F16, nearest, and one F16 step up where it rounded to 0 for a
      // nonzero block or where rounding down would push the block's maximum past code 127.5
      // (both only in F16's subnormal range, amax below about 7.8e-3, whose steps are coarse);
      // the codes are rounded against that value, so every code is within half a step.
      uint16_t scale_f16 = F32ToF16(std::min(amax / 127.0f, kF16Max));
      if (amax > 0.0f && scale_f16 < 0x7bff &&
          (scale_f16 == 0 || amax / F16ToF32(scale_f16) > 127.5f)) {
        ++scale_f16;
      }
      const float scale = F16ToF32(scale_f16);
      // The block's codes first (a loop the compiler can keep in vector registers), then stored
      // 4 columns (one 4-byte run of the layout) at a time.
      int8_t codes[kQ8Block] = {};
      if (scale > 0.0f) {  // an all-zero block: scale 0, codes 0
        // |x / scale| <= 127.5 but at the 65504 cap, where the clamp saturates the codes (and
        // keeps a tie at 127.5 from rounding to 128).
        auto code = [&](int64_t k) {
          codes[k] =
              static_cast<int8_t>(std::clamp(RoundToNearestEven(x[k] / scale), -127.0f, 127.0f));
        };
        if (n == kQ8Block) {  // a fixed trip count: the compiler vectorizes it
          for (int64_t k = 0; k < kQ8Block; ++k) code(k);
        } else {
          for (int64_t k = 0; k < n; ++k) code(k);
        }
      }
      for (int64_t k = 0; k < n; k += 4) {
        if (k + 4 <= n) {
          std::memcpy(q + Q8WeightIndex(K, d, k0 + k), codes + k, 4);
        } else {
          for (int64_t t = k; t < n; ++t) q[Q8WeightIndex(K, d, k0 + t)] = codes[t];
        }
      }
      scales[Q8BlockIndex(K, d, blk)] = scale_f16;
    }
    for (int64_t k = K; k < 4 * l.steps; ++k) q[Q8WeightIndex(K, d, k)] = 0;
    if (d == dst_rows - 1) {
      // The padding rows of the last group, written with the last row.
      for (int64_t p = d + 1; p < l.groups * kQ8Group; ++p) {
        for (int64_t k = 0; k < 4 * l.steps; ++k) q[Q8WeightIndex(K, p, k)] = 0;
        for (int64_t blk = 0; blk < l.blocks; ++blk) scales[Q8BlockIndex(K, p, blk)] = 0;
      }
    }
  }
}

void Q8Activations::Resize(int64_t r, int64_t c) {
  rows = r;
  cols = c;
  blocks = Q8Blocks(c);
  q.resize(static_cast<size_t>(r * c + kQ8ActivationSlack));
  scales.resize(static_cast<size_t>(r * blocks));
  zero_terms.resize(static_cast<size_t>(r * blocks));
}

void QuantizeActivationsQ8(const float* x, int64_t r0, int64_t r1, Q8Activations* a) {
  const int64_t K = a->cols, nb = a->blocks;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * K;
    for (int64_t blk = 0; blk < nb; ++blk) {
      const int64_t k0 = blk * kQ8Block, k1 = std::min(K, k0 + kQ8Block);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(xr[k]));
      const bool nonzero = amax >= kQ8MinActivationAmax;
      const float inv = nonzero ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int64_t k = k0; k < k1; ++k) {
        const auto v =
            static_cast<int32_t>(std::clamp(std::nearbyint(xr[k] * inv), -127.0f, 127.0f));
        a->q[size_t(r * K + k)] = static_cast<int8_t>(v);
        sum += v;
      }
      a->scales[size_t(r * nb + blk)] = nonzero ? amax / 127.0f : 0.0f;
      a->zero_terms[size_t(r * nb + blk)] = -kQ8WeightFlip * sum;
    }
  }
}

}  // namespace vls::kernels
