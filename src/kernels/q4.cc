#include "kernels/q4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "kernels/quantizer_choice.h"
#include "tensor/dtype.h"

namespace vls::kernels {

// quantize_avx512.cc, quantize_avx2.cc (x86-64 builds; called only on CPUs with them).
void QuantizeQ4GroupsAvx512(const float* const* x, int64_t n, uint16_t* d, uint16_t* m, uint8_t* q);
void QuantizeQ4GroupsAvx2(const float* const* x, int64_t n, uint16_t* d, uint16_t* m, uint8_t* q);

namespace {

constexpr int64_t AlignUp64(int64_t n) { return (n + 63) / 64 * 64; }

uint16_t LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Σ w · (d · l + m - x)² of one group coded as l.
float GroupError(const float* x, const float* w, const uint8_t* l, float d, float m) {
  float err = 0.0f;
  for (int64_t i = 0; i < kQ4Group; ++i) {
    const float e = d * static_cast<float>(l[i]) + m - x[i];
    err += w[i] * e * e;
  }
  return err;
}

// Round to nearest even of v in [0, 15] (ggml's nearest_int: adding 1.5 · 2²³ leaves the
// rounded value in the low mantissa bits), as std::nearbyint in the default rounding mode but
// without its library call on baseline x86-64, which made preparing a model 10× slower.
uint8_t RoundCode(float v) {
  const float f = std::clamp(v, 0.0f, 15.0f) + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return static_cast<uint8_t>((i & 0x007fffff) - 0x00400000);
}

void Code(const float* x, float iscale, float lo, uint8_t* l) {
  for (int64_t i = 0; i < kQ4Group; ++i) l[i] = RoundCode(iscale * (x[i] - lo));
}

}  // namespace

Matrix Q4MatrixAt(const void* base, int64_t rows, int64_t cols) {
  Matrix m;
  m.data = base;
  m.rows = rows;
  m.cols = cols;
  m.format = MatrixFormat::kQ4;
  return m;
}

int Q4Code(const Matrix& w, int64_t r, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w.data) + Q4BlockOffset(w.cols, r, k);
  const uint8_t byte = b[Q4CodeOffset(r, k)];
  return (k % kQ4Group) >= 16 ? byte >> 4 : byte & 15;
}

float Q4Scale(const Matrix& w, int64_t r, int64_t group) {
  const auto* b = static_cast<const uint8_t*>(w.data) + Q4BlockOffset(w.cols, r, group * kQ4Group);
  return F16ToF32(LoadF16(b + kQ4ScalesOffset + 2 * (r % kQ4Rows)));
}

float Q4Min(const Matrix& w, int64_t r, int64_t group) {
  const auto* b = static_cast<const uint8_t*>(w.data) + Q4BlockOffset(w.cols, r, group * kQ4Group);
  return F16ToF32(LoadF16(b + kQ4MinsOffset + 2 * (r % kQ4Rows)));
}

// ggml's make_qkx2_quants (nmax 15, rmin -1, rdelta 0.1, 20 steps) with Q4_K's importance
// weights: each candidate inverse scale codes the group, a weighted least-squares fit gives its
// (d, m), and the fit of least weighted error wins. Then d and m are rounded to F16 and the
// codes are chosen again against the rounded values, so what is stored is self-consistent.
void QuantizeQ4Group(const float* x, uint16_t* dh, uint16_t* mh, uint8_t* q) {
  constexpr int64_t n = kQ4Group;
  float w[n];
  float lo = x[0], hi = x[0], sum_x2 = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_x2 += x[i] * x[i];
  }
  const float av = std::sqrt(sum_x2 / static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) w[i] = av + std::fabs(x[i]);
  float d = 0.0f, m = lo;
  if (hi > lo) {
    uint8_t l[n];
    float iscale = 15.0f / (hi - lo);
    d = 1.0f / iscale;
    Code(x, iscale, lo, l);
    float best = GroupError(x, w, l, d, m);
    for (int is = 0; is <= 20; ++is) {
      iscale = (-1.0f + 0.1f * static_cast<float>(is) + 15.0f) / (hi - lo);
      Code(x, iscale, lo, l);
      float sw = 0.0f, sl = 0.0f, sl2 = 0.0f, sxl = 0.0f, sx = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float li = static_cast<float>(l[i]);
        sw += w[i];
        sl += w[i] * li;
        sl2 += w[i] * li * li;
        sxl += w[i] * li * x[i];
        sx += w[i] * x[i];
      }
      const float det = sw * sl2 - sl * sl;
      if (det <= 0.0f) continue;
      const float td = (sw * sxl - sx * sl) / det;
      const float tm = (sl2 * sx - sl * sxl) / det;
      if (!(td > 0.0f)) continue;
      const float err = GroupError(x, w, l, td, tm);
      if (err < best) {
        best = err;
        d = td;
        m = tm;
      }
    }
  }
  *dh = F32ToF16(d);
  *mh = F32ToF16(m);
  const float dd = F16ToF32(*dh), mm = F16ToF32(*mh);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = dd > 0.0f ? RoundCode((x[i] - mm) / dd) : 0;
  }
}

void RefQuantizeQ4Groups(const float* const* x, int64_t n, uint16_t* d, uint16_t* m, uint8_t* q) {
  for (int64_t j = 0; j < n; ++j) QuantizeQ4Group(x[j], d + j, m + j, q + j * kQ4Group);
}

std::vector<const Q4Quantizer*> SupportedQ4Quantizers() {
  static const Q4Quantizer reference = {"reference", RefQuantizeQ4Groups};
  std::vector<const Q4Quantizer*> all = {&reference};
#if defined(__x86_64__)
  static const Q4Quantizer avx2 = {"avx2", QuantizeQ4GroupsAvx2};
  static const Q4Quantizer avx512 = {"avx512", QuantizeQ4GroupsAvx512};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) all.push_back(&avx2);
  if (__builtin_cpu_supports("avx512f")) all.push_back(&avx512);
#endif
  return all;
}

const Q4Quantizer& DefaultQ4Quantizer() {
  static const Q4Quantizer* const q = ChooseQuantizer(SupportedQ4Quantizers(), "VLS_Q4_QUANTIZER");
  return *q;
}

void QuantizeQ4(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                int64_t dst_row) {
  QuantizeQ4With(DefaultQ4Quantizer(), src, r0, r1, dst, dst_rows, dst_row);
}

void QuantizeQ4With(const Q4Quantizer& quantizer, const Matrix& src, int64_t r0, int64_t r1,
                    void* dst, int64_t dst_rows, int64_t dst_row) {
  const int64_t K = src.cols, groups = Q4Groups(K);
  auto* base = static_cast<uint8_t*>(dst);
  auto put = [&](int64_t d, int64_t g, uint16_t dh, uint16_t mh, const uint8_t* q) {
    uint8_t* b = base + Q4BlockOffset(K, d, g * kQ4Group);
    for (int64_t i = 0; i < 16; ++i) {
      b[Q4CodeOffset(d, i)] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
    }
    std::memcpy(b + kQ4ScalesOffset + 2 * (d % kQ4Rows), &dh, 2);
    std::memcpy(b + kQ4MinsOffset + 2 * (d % kQ4Rows), &mh, 2);
  };
  // Rows in chunks of kQ4Rows, their groups handed to the quantizer kBatch at a time (so a
  // SIMD quantizer's lanes stay full whatever the row's group count).
  constexpr int64_t kBatch = 64;
  std::vector<float> rows(static_cast<size_t>(kQ4Rows * K));  // [kQ4Rows, K]
  const float* x[kBatch];
  uint16_t dh[kBatch], mh[kBatch];
  uint8_t q[kBatch * kQ4Group];
  for (int64_t c0 = r0; c0 < r1; c0 += kQ4Rows) {
    const int64_t c1 = std::min(r1, c0 + kQ4Rows), total = (c1 - c0) * groups;
    for (int64_t r = c0; r < c1; ++r) LoadRow(src, r, rows.data() + (r - c0) * K);
    for (int64_t f0 = 0; f0 < total; f0 += kBatch) {
      const int64_t n = std::min(kBatch, total - f0);
      for (int64_t j = 0; j < n; ++j) x[j] = rows.data() + (f0 + j) * kQ4Group;
      quantizer.groups(x, n, dh, mh, q);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t f = f0 + j;
        put(dst_row + c0 + f / groups, f % groups, dh[j], mh[j], q + j * kQ4Group);
      }
    }
  }
  // The padding rows of the last row group, written with the last row.
  const uint8_t zeros[kQ4Group] = {};
  if (r1 > r0 && dst_row + r1 == dst_rows) {
    for (int64_t p = dst_rows; p < Q4RowGroups(dst_rows) * kQ4Rows; ++p) {
      for (int64_t g = 0; g < groups; ++g) put(p, g, 0, 0, zeros);
    }
  }
}

int64_t Q4ActivationBytes(int64_t rows, int64_t cols) {
  return AlignUp64(rows * cols) + 2 * AlignUp64(rows * Q4Groups(cols) * 4);
}

Q4Activations Q4ActivationsAt(void* buf, int64_t rows, int64_t cols) {
  auto* b = static_cast<uint8_t*>(buf);
  Q4Activations a;
  a.rows = rows;
  a.cols = cols;
  a.groups = Q4Groups(cols);
  a.q = reinterpret_cast<int8_t*>(b);
  a.scales = reinterpret_cast<float*>(b + AlignUp64(rows * cols));
  a.sums = reinterpret_cast<float*>(b + AlignUp64(rows * cols) + AlignUp64(rows * a.groups * 4));
  return a;
}

void QuantizeActivationsQ4(const float* x, int64_t r0, int64_t r1, const Q4Activations& a) {
  const int64_t K = a.cols, ng = a.groups;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      const float* xg = x + r * K + g * kQ4Group;
      int8_t* qg = a.q + r * K + g * kQ4Group;
      float amax = 0.0f;
      for (int64_t k = 0; k < kQ4Group; ++k) amax = std::max(amax, std::fabs(xg[k]));
      const bool nonzero = amax >= kQ8MinActivationAmax;
      const float inv = nonzero ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int64_t k = 0; k < kQ4Group; ++k) {
        const float v = std::clamp(std::nearbyint(xg[k] * inv), -127.0f, 127.0f);
        qg[k] = static_cast<int8_t>(v);
        sum += qg[k];
      }
      a.scales[r * ng + g] = nonzero ? amax / 127.0f : 0.0f;
      a.sums[r * ng + g] = static_cast<float>(sum);
    }
  }
}

void RefMatMulQ4(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const int64_t M = x.rows, K = x.cols, N = w.rows, ng = x.groups;
  // One weight row's codes, scales and mins, decoded once for all M rows.
  std::vector<int32_t> q(static_cast<size_t>(K));
  std::vector<float> d(static_cast<size_t>(ng)), mn(static_cast<size_t>(ng));
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t k = 0; k < K; ++k) q[size_t(k)] = Q4Code(w, n, k);
    for (int64_t g = 0; g < ng; ++g) {
      d[size_t(g)] = Q4Scale(w, n, g);
      mn[size_t(g)] = Q4Min(w, n, g);
    }
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0.0f;
      for (int64_t g = 0; g < ng; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * kQ4Group; k < (g + 1) * kQ4Group; ++k) {
          dot += int32_t{x.q[m * K + k]} * q[size_t(k)];
        }
        float t = static_cast<float>(dot) * d[size_t(g)];
        t = std::fma(mn[size_t(g)], x.sums[m * ng + g], t);
        acc = std::fma(t, x.scales[m * ng + g], acc);
      }
      y[m * N + n] = acc;
    }
  }
}

const Q4Kernels& ReferenceQ4Kernels() {
  static const Q4Kernels k = {"reference", QuantizeActivationsQ4, RefMatMulQ4, RefMatMulQ6};
  return k;
}

const Q4Kernels& Q4KernelsFor(const KernelVariant& v) {
  return v.q4 != nullptr ? *v.q4 : ReferenceQ4Kernels();
}

}  // namespace vls::kernels
