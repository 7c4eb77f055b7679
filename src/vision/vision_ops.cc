#include "vision/vision_ops.h"

#include <algorithm>
#include <cmath>

namespace vls::vision_internal {
namespace {

// Rows per ParallelFor chunk for row-wise loops: enough work per chunk to amortise the dispatch.
int64_t RowGrain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)); }

EncodeProfile* g_profile = nullptr;

}  // namespace

void ForPieces(int64_t n, double flops_each, int64_t multiple,
               const std::function<void(int64_t, int64_t)>& fn) {
  multiple = std::max<int64_t>(1, multiple);
  const double per = flops_each > 0 ? kLoopFlops / flops_each : static_cast<double>(n);
  const int64_t piece = std::max<int64_t>(
      multiple, static_cast<int64_t>(per / static_cast<double>(multiple)) * multiple);
  for (int64_t b = 0; b < n; b += piece) fn(b, std::min(n, b + piece));
}

const char* EncodePhaseName(int phase) {
  static constexpr const char* kNames[kPhaseCount] = {
      "patch", "norm", "qkv", "bias", "rope", "attention", "proj", "fc1", "gelu", "fc2", "merger"};
  return phase >= 0 && phase < kPhaseCount ? kNames[phase] : "?";
}
void SetEncodeProfile(EncodeProfile* profile) { g_profile = profile; }
EncodeProfile* CurrentEncodeProfile() { return g_profile; }

PatchLayout MakePatchLayout(std::span<const GridThw> grids, int merge) {
  PatchLayout L;
  L.segments.push_back(0);
  int64_t np = 0;
  for (const GridThw& g : grids) np += int64_t{g.t} * g.h * g.w;
  L.item.reserve(static_cast<size_t>(np));
  L.row.reserve(static_cast<size_t>(np));
  L.col.reserve(static_cast<size_t>(np));
  for (size_t i = 0; i < grids.size(); ++i) {
    const GridThw& g = grids[i];
    for (int32_t t = 0; t < g.t; ++t) {
      for (int32_t bh = 0; bh < g.h / merge; ++bh) {
        for (int32_t bw = 0; bw < g.w / merge; ++bw) {
          for (int32_t ih = 0; ih < merge; ++ih) {
            for (int32_t iw = 0; iw < merge; ++iw) {
              L.item.push_back(static_cast<int32_t>(i));
              L.row.push_back(bh * merge + ih);
              L.col.push_back(bw * merge + iw);
            }
          }
        }
      }
      L.segments.push_back(L.segments.back() + int64_t{g.h} * g.w);
    }
  }
  return L;
}

AxisSample SampleAxis(int64_t i, int64_t n, int64_t side) {
  AxisSample s;
  const double x =
      n > 1 ? static_cast<double>(i) * static_cast<double>(side - 1) / static_cast<double>(n - 1)
            : 0.0;
  s.lo = static_cast<int32_t>(std::min<double>(std::floor(x), static_cast<double>(side - 1)));
  s.hi = static_cast<int32_t>(std::min<int64_t>(s.lo + 1, side - 1));
  s.frac = x - s.lo;
  return s;
}

void InterpolatePositions(const PatchLayout& layout, std::span<const GridThw> grids,
                          const float* table, int64_t side, int64_t D, float* out,
                          ThreadPool& pool) {
  const auto np = static_cast<int64_t>(layout.item.size());
  pool.ParallelFor(np, RowGrain(D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const GridThw& g = grids[static_cast<size_t>(layout.item[static_cast<size_t>(r)])];
      const AxisSample a = SampleAxis(layout.row[static_cast<size_t>(r)], g.h, side);
      const AxisSample b = SampleAxis(layout.col[static_cast<size_t>(r)], g.w, side);
      const float w00 = static_cast<float>((1 - a.frac) * (1 - b.frac));
      const float w01 = static_cast<float>((1 - a.frac) * b.frac);
      const float w10 = static_cast<float>(a.frac * (1 - b.frac));
      const float w11 = static_cast<float>(a.frac * b.frac);
      const float* p00 = table + (a.lo * side + b.lo) * D;
      const float* p01 = table + (a.lo * side + b.hi) * D;
      const float* p10 = table + (a.hi * side + b.lo) * D;
      const float* p11 = table + (a.hi * side + b.hi) * D;
      float* o = out + r * D;
      for (int64_t d = 0; d < D; ++d) {
        o[d] = w00 * p00[d] + w01 * p01[d] + w10 * p10[d] + w11 * p11[d];
      }
    }
  });
}

void RotaryTables(const PatchLayout& layout, int64_t head_dim, float* cos, float* sin,
                  ThreadPool& pool) {
  const int64_t quarter = head_dim / 4, half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(quarter));
  for (int64_t i = 0; i < quarter; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        1.0 / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(half));
  }
  const auto np = static_cast<int64_t>(layout.item.size());
  pool.ParallelFor(np, RowGrain(half * 8), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double pos[2] = {static_cast<double>(layout.row[static_cast<size_t>(r)]),
                             static_cast<double>(layout.col[static_cast<size_t>(r)])};
      for (int axis = 0; axis < 2; ++axis) {
        for (int64_t i = 0; i < quarter; ++i) {
          const double angle = pos[axis] * inv_freq[static_cast<size_t>(i)];
          cos[r * half + axis * quarter + i] = static_cast<float>(std::cos(angle));
          sin[r * half + axis * quarter + i] = static_cast<float>(std::sin(angle));
        }
      }
    }
  });
}

void LayerNormRow(const float* x, int64_t n, const float* w, const float* b, float eps,
                  float* out) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    sq += d * d;
  }
  const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  const auto m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - m) * inv * w[i] + b[i];
}

namespace {

#ifdef VLS_VISION_AVX512
constexpr bool kHaveAvx512 = true;
#else
constexpr bool kHaveAvx512 = false;
#endif

// x[n] += y[n] + b[n] (y may be null).
void AddRows(float* x, const float* y, const float* b, int64_t n, bool avx512) {
#ifdef VLS_VISION_AVX512
  if (avx512) {
    AddRowsAvx512(x, y, b, n);
    return;
  }
#endif
  (void)avx512;
  if (y == nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] += b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i] + b[i];
  }
}

void NormRow(const float* x, int64_t n, const float* w, const float* b, float eps, float* out,
             bool avx512) {
#ifdef VLS_VISION_AVX512
  if (avx512) {
    LayerNormRowAvx512(x, n, w, b, eps, out);
    return;
  }
#endif
  (void)avx512;
  LayerNormRow(x, n, w, b, eps, out);
}

}  // namespace

void LayerNormRows(const float* x, int64_t M, int64_t n, const float* w, const float* b, float eps,
                   float* out, ThreadPool& pool, bool avx512) {
  avx512 = avx512 && kHaveAvx512;
  pool.ParallelFor(M, RowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) NormRow(x + r * n, n, w, b, eps, out + r * n, avx512);
  });
}

void AddBias(float* y, int64_t M, int64_t n, const float* b, ThreadPool& pool, bool avx512) {
  avx512 = avx512 && kHaveAvx512;
  pool.ParallelFor(M, RowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) AddRows(y + r * n, nullptr, b, n, avx512);
  });
}

void AddBiasResidual(float* x, const float* y, int64_t M, int64_t n, const float* b,
                     ThreadPool& pool, bool avx512) {
  avx512 = avx512 && kHaveAvx512;
  pool.ParallelFor(M, RowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) AddRows(x + r * n, y + r * n, b, n, avx512);
  });
}

void AddBiasResidualLayerNorm(float* x, const float* y, int64_t M, int64_t n, const float* b,
                              const float* w, const float* b2, float eps, float* out,
                              ThreadPool& pool, bool avx512) {
  avx512 = avx512 && kHaveAvx512;
  pool.ParallelFor(M, RowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      AddRows(x + r * n, y + r * n, b, n, avx512);
      NormRow(x + r * n, n, w, b2, eps, out + r * n, avx512);
    }
  });
}

// 0.5·x·(1 + tanh(u)) = x · sigmoid(2u): the form the AVX-512 loop uses too.
float GeluTanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return x / (1.0f + std::exp(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

float GeluErf(float x) {
  constexpr float kSqrtHalf = 0.7071067811865476f;
  return 0.5f * x * (1.0f + std::erf(x * kSqrtHalf));
}

void AddBiasGeluTanh(float* y, int64_t M, int64_t n, const float* b, bool avx512,
                     ThreadPool& pool) {
#ifndef VLS_VISION_AVX512
  avx512 = false;
#endif
  pool.ParallelFor(M, RowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
#ifdef VLS_VISION_AVX512
      if (avx512) {
        AddBiasGeluTanhAvx512(y + r * n, b, n);
        continue;
      }
#endif
      float* yr = y + r * n;
      for (int64_t i = 0; i < n; ++i) yr[i] = GeluTanh(yr[i] + b[i]);
    }
  });
}

void AddBiasGeluErf(float* y, int64_t M, int64_t n, const float* b, ThreadPool& pool) {
  pool.ParallelFor(M, RowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * n;
      for (int64_t i = 0; i < n; ++i) yr[i] = GeluErf(yr[i] + b[i]);
    }
  });
}

}  // namespace vls::vision_internal
