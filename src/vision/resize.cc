#include "vision/resize.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace vls {
namespace {

// Keys' cubic (a = -0.5) as torch's antialiased kernel evaluates it (the Pillow form, taken
// over by torch): the first branch in double, the second in float, each multiply-add fused as
// GCC contracts them in torch's AVX2 build. x is the float torch passes in.
float CubicFilter(float x) {
  if (x < 0.0f) x = -x;
  const double xd = x;
  if (xd < 1.0) {
    // ((a + 2) x - (a + 3)) x x + 1
    return static_cast<float>(std::fma(std::fma(1.5, xd, -2.5) * xd, xd, 1.0));
  }
  if (xd < 2.0) {
    // (((x - 5) x + 8) x - 4) a, the polynomial in float
    const float p = std::fma(std::fma(x - 5.0f, x, 8.0f), x, -4.0f);
    return static_cast<float>(static_cast<double>(p) * -0.5);
  }
  return 0.0f;
}

// The taps of one axis: output i reads inputs [start[i], start[i] + count[i]) with weights
// weights[i * taps + j].
struct AxisFilter {
  int taps = 0;
  std::vector<int> start;      // [out]
  std::vector<int> count;      // [out]
  std::vector<float> weights;  // [out, taps]
};

// torch's _compute_weights_aa for bicubic (interp_size 4) in float, step by step: the scale is
// float(in) / out; center and the filter argument go through double where torch's expressions
// mix in a double literal.
AxisFilter ComputeAxis(int in_size, int out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = scale >= 1.0f ? static_cast<float>(2.0 * scale) : 2.0f;
  const float invscale = scale >= 1.0f ? static_cast<float>(1.0 / scale) : 1.0f;
  AxisFilter f;
  f.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.start.resize(out_size);
  f.count.resize(out_size);
  f.weights.assign(static_cast<size_t>(out_size) * f.taps, 0.0f);
  for (int i = 0; i < out_size; ++i) {
    const float center = static_cast<float>(scale * (i + 0.5));
    // torch truncates (x + 0.5) toward zero here, negative x included: the same bounds.
    const double lo = static_cast<double>(center - support) + 0.5;
    const double hi = static_cast<double>(center + support) + 0.5;
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(lo), 0);
    const int64_t xmax = std::min<int64_t>(static_cast<int64_t>(hi), in_size);
    const int64_t xsize = std::max<int64_t>(0, std::min<int64_t>(xmax - xmin, f.taps));
    float* w = &f.weights[static_cast<size_t>(i) * f.taps];
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      const float d = static_cast<float>(j + xmin) - center;
      w[j] = CubicFilter(static_cast<float>((static_cast<double>(d) + 0.5) * invscale));
      total += w[j];
    }
    if (total != 0.0f) {
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    }
    f.start[i] = static_cast<int>(xmin);
    f.count[i] = static_cast<int>(xsize);
  }
  return f;
}

// How torch's AVX2 build sums the taps of one output (found by matching its float output bit
// for bit): out = t0 * w0, then for taps 1 .. n-1 GCC's loop vectorizer (4 lanes) computes the
// products of each full group of 4 taps as rounded floats and adds them in order, and the
// remaining (n - 1) % 4 taps go through the scalar loop, where the multiply-add is fused.
int UnfusedTaps(int n) { return (n - 1) / 4 * 4; }

// The two passes are compiled twice: once with the CPU's FMA instruction (x86-64 CPUs that
// have it, found at run time) and once portable, where std::fma is a library call. Both give
// the same bits; only the speed differs. The bodies are always inlined into the two entry
// points so that each copy is compiled for its target. This file is compiled with
// -ffp-contract=off (preprocess.cmake), so a product written as its own statement stays
// rounded instead of being fused into the following add.
#if defined(__GNUC__)
#define VLS_RESIZE_INLINE inline __attribute__((always_inline))
#else
#define VLS_RESIZE_INLINE inline
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define VLS_RESIZE_HAVE_FMA_PATH 1
#define VLS_RESIZE_TARGET_FMA __attribute__((target("fma")))
#else
#define VLS_RESIZE_HAVE_FMA_PATH 0
#endif

// Rows [y0, y1) of the horizontal pass: src [H, W_in, 3] uint8 -> dst [H, W_out, 3] float.
// The three channels' sums are independent chains advanced together.
VLS_RESIZE_INLINE void HorizontalRowsImpl(const uint8_t* src, int in_w, float* dst,
                                          const AxisFilter& f, int out_w, int64_t y0, int64_t y1) {
  for (int64_t y = y0; y < y1; ++y) {
    const uint8_t* row = src + y * in_w * 3;
    float* out = dst + y * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const float* w = &f.weights[static_cast<size_t>(x) * f.taps];
      const uint8_t* p = row + static_cast<ptrdiff_t>(f.start[x]) * 3;
      const int n = f.count[x];
      const int unfused = UnfusedTaps(n);
      float a0 = static_cast<float>(p[0]) * w[0];
      float a1 = static_cast<float>(p[1]) * w[0];
      float a2 = static_cast<float>(p[2]) * w[0];
      int j = 1;
      for (; j <= unfused; ++j) {
        const float p0 = static_cast<float>(p[j * 3]) * w[j];
        const float p1 = static_cast<float>(p[j * 3 + 1]) * w[j];
        const float p2 = static_cast<float>(p[j * 3 + 2]) * w[j];
        a0 += p0;
        a1 += p1;
        a2 += p2;
      }
      for (; j < n; ++j) {
        a0 = std::fma(static_cast<float>(p[j * 3]), w[j], a0);
        a1 = std::fma(static_cast<float>(p[j * 3 + 1]), w[j], a1);
        a2 = std::fma(static_cast<float>(p[j * 3 + 2]), w[j], a2);
      }
      out[x * 3 + 0] = a0;
      out[x * 3 + 1] = a1;
      out[x * 3 + 2] = a2;
    }
  }
}

// Output rows [y0, y1) of the vertical pass: src [H_in, W, 3] -> dst [H_out, W, 3], a row at a
// time so the inner loops run over contiguous floats; the same summation as the horizontal
// pass. src and dst never overlap.
VLS_RESIZE_INLINE void VerticalRowsImpl(const float* __restrict src, int64_t row_len,
                                        float* __restrict dst, const AxisFilter& f, int64_t y0,
                                        int64_t y1) {
  for (int64_t y = y0; y < y1; ++y) {
    const float* w = &f.weights[static_cast<size_t>(y) * f.taps];
    const float* __restrict first = src + static_cast<int64_t>(f.start[y]) * row_len;
    float* __restrict out = dst + y * row_len;
    const int n = f.count[y];
    const int unfused = UnfusedTaps(n);
    const float w0 = w[0];
    // Blocks of kLanes with a fixed inner count: GCC's -O2 cost model vectorizes those
    // (element-wise, so the bits do not change); the tail runs one by one.
    constexpr int kLanes = 8;
    const int64_t blocked = row_len / kLanes * kLanes;
    for (int64_t k = 0; k < row_len; ++k) out[k] = first[k] * w0;
    int j = 1;
    for (; j <= unfused; ++j) {
      const float* __restrict in = first + j * row_len;
      const float wj = w[j];
      int64_t k = 0;
      for (; k < blocked; k += kLanes) {
        for (int u = 0; u < kLanes; ++u) {
          const float prod = in[k + u] * wj;
          out[k + u] += prod;
        }
      }
      for (; k < row_len; ++k) {
        const float prod = in[k] * wj;
        out[k] += prod;
      }
    }
    for (; j < n; ++j) {
      const float* __restrict in = first + j * row_len;
      const float wj = w[j];
      int64_t k = 0;
      for (; k < blocked; k += kLanes) {
        for (int u = 0; u < kLanes; ++u) out[k + u] = std::fma(in[k + u], wj, out[k + u]);
      }
      for (; k < row_len; ++k) out[k] = std::fma(in[k], wj, out[k]);
    }
  }
}

void HorizontalRowsPortable(const uint8_t* src, int in_w, float* dst, const AxisFilter& f,
                            int out_w, int64_t y0, int64_t y1) {
  HorizontalRowsImpl(src, in_w, dst, f, out_w, y0, y1);
}
void VerticalRowsPortable(const float* src, int64_t row_len, float* dst, const AxisFilter& f,
                          int64_t y0, int64_t y1) {
  VerticalRowsImpl(src, row_len, dst, f, y0, y1);
}
#if VLS_RESIZE_HAVE_FMA_PATH
VLS_RESIZE_TARGET_FMA void HorizontalRowsFma(const uint8_t* src, int in_w, float* dst,
                                             const AxisFilter& f, int out_w, int64_t y0,
                                             int64_t y1) {
  HorizontalRowsImpl(src, in_w, dst, f, out_w, y0, y1);
}
VLS_RESIZE_TARGET_FMA void VerticalRowsFma(const float* src, int64_t row_len, float* dst,
                                           const AxisFilter& f, int64_t y0, int64_t y1) {
  VerticalRowsImpl(src, row_len, dst, f, y0, y1);
}
#endif

bool UseFmaPath() {
#if VLS_RESIZE_HAVE_FMA_PATH
  static const bool has_fma = __builtin_cpu_supports("fma");
  return has_fma;
#else
  return false;
#endif
}

void HorizontalRows(bool fma, const uint8_t* src, int in_w, float* dst, const AxisFilter& f,
                    int out_w, int64_t y0, int64_t y1) {
#if VLS_RESIZE_HAVE_FMA_PATH
  if (fma) return HorizontalRowsFma(src, in_w, dst, f, out_w, y0, y1);
#endif
  HorizontalRowsPortable(src, in_w, dst, f, out_w, y0, y1);
}

void VerticalRows(bool fma, const float* src, int64_t row_len, float* dst, const AxisFilter& f,
                  int64_t y0, int64_t y1) {
#if VLS_RESIZE_HAVE_FMA_PATH
  if (fma) return VerticalRowsFma(src, row_len, dst, f, y0, y1);
#endif
  VerticalRowsPortable(src, row_len, dst, f, y0, y1);
}

uint8_t ToU8(float v) {
  v = std::min(std::max(v, 0.0f), 255.0f);
  return static_cast<uint8_t>(std::nearbyint(v));  // round half to even, as torch.round
}

void Run(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, 8, fn);
  }
}

}  // namespace

image::RgbImage ResizeBicubicAntialias(const image::RgbImage& in, int out_height, int out_width,
                                       ThreadPool* pool, bool allow_fma_instruction) {
  const bool fma = allow_fma_instruction && UseFmaPath();
  const int in_h = in.height;
  const int in_w = in.width;
  image::RgbImage out;
  out.height = out_height;
  out.width = out_width;
  if (in_h == out_height && in_w == out_width) {
    out.pixels = in.pixels;
    return out;
  }
  // Width first, as torch: [in_h, in_w, 3] -> [in_h, out_width, 3] (float).
  std::vector<float> wide(static_cast<size_t>(in_h) * out_width * 3);
  if (in_w != out_width) {
    const AxisFilter fx = ComputeAxis(in_w, out_width);
    Run(pool, in_h, [&](int64_t a, int64_t b) {
      HorizontalRows(fma, in.pixels.data(), in_w, wide.data(), fx, out_width, a, b);
    });
  } else {
    std::transform(in.pixels.begin(), in.pixels.end(), wide.begin(),
                   [](uint8_t v) { return static_cast<float>(v); });
  }
  const int64_t row_len = static_cast<int64_t>(out_width) * 3;
  std::vector<float> tall;
  const std::vector<float>* result = &wide;
  if (in_h != out_height) {
    tall.resize(static_cast<size_t>(out_height) * row_len);
    const AxisFilter fy = ComputeAxis(in_h, out_height);
    Run(pool, out_height, [&](int64_t a, int64_t b) {
      VerticalRows(fma, wide.data(), row_len, tall.data(), fy, a, b);
    });
    result = &tall;
  }
  out.pixels.resize(result->size());
  std::transform(result->begin(), result->end(), out.pixels.begin(), ToU8);
  return out;
}

}  // namespace vls
