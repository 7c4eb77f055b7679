#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/bf16_blocked.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"

namespace vls::kernels {

void LoadRow(const Matrix& m, int64_t r, float* out) {
  const int64_t n = m.cols;
  if (m.format == MatrixFormat::kQ8) {
    const auto* q = static_cast<const int8_t*>(m.data);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<float>(q[Q8WeightIndex(n, r, i)]) *
               F16ToF32(m.scales[Q8BlockIndex(n, r, i / kQ8Block)]);
    }
    return;
  }
  if (m.format == MatrixFormat::kQ4) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = i / kQ4Group;
      out[i] = Q4Scale(m, r, g) * static_cast<float>(Q4Code(m, r, i)) + Q4Min(m, r, g);
    }
    return;
  }
  if (m.format == MatrixFormat::kQ6) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = Q6Scale(m, r, i / kQ6Group) * static_cast<float>(Q6Code(m, r, i) - kQ6Zero);
    }
    return;
  }
  if (m.format == MatrixFormat::kBf16Blocked) {
    const auto* p = static_cast<const uint16_t*>(m.data);
    const int64_t kp = Bf16PaddedCols(n);
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToF32(p[Bf16BlockedIndex(r, i, kp)]);
    return;
  }
  switch (m.dtype) {
    case DType::kF32:
      std::memcpy(out, static_cast<const float*>(m.data) + r * n, n * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(m.data) + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToF32(p[i]);
      return;
    }
    case DType::kF16: {
      const auto* p = static_cast<const uint16_t*>(m.data) + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = F16ToF32(p[i]);
      return;
    }
    case DType::kI32:
    case DType::kF8E4M3:  // block-scaled: dequantized by the loader (model/fp8_weights.h)
      break;
  }
  std::fill(out, out + n, 0.0f);  // unreachable for bound weights (dtype checked at load)
}

void MatMulTransposed(const float* x, int64_t M, int64_t K, const Matrix& w, float* y) {
  const int64_t N = w.rows;
  std::vector<float> row(static_cast<size_t>(K));
  // Loop over weight rows outermost so each weight row is converted once for all M inputs.
  for (int64_t n = 0; n < N; ++n) {
    LoadRow(w, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * K;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += xm[k] * row[k];
      y[m * N + n] = acc;
    }
  }
}

void RmsNorm(const float* x, int64_t M, int64_t n, const float* weight, float eps, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * n;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += xm[i] * xm[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    float* om = out + m * n;
    for (int64_t i = 0; i < n; ++i) om[i] = xm[i] * inv * weight[i];
  }
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void WeightedRows(const float* w, const float* const* rows, int64_t k, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float o = 0.0f;
    for (int64_t j = 0; j < k; ++j) o = std::fma(w[j], rows[j][i], o);
    out[i] = o;
  }
}

void ApplyRope(float* x, const float* cos, const float* sin, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i];
    const float b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

void Softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace vls::kernels
