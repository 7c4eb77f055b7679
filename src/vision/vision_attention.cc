#include "vision/vision_attention.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "kernels/onednn_matmul.h"
#include "tensor/dtype.h"
#include "vision/vision_ops.h"

namespace vls::vision_internal {
namespace {

void ToBf16(const kernels::Context& ctx, const float* x, int64_t n, uint16_t* out) {
  if (ctx.variant().to_bf16 != nullptr) {
    ctx.variant().to_bf16(x, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToBf16(x[i]);
}

void AddRowsAvx512OrScalar(float* x, const float* b, int64_t n, bool avx512) {
#ifdef VLS_VISION_AVX512
  if (avx512) {
    AddRowsAvx512(x, nullptr, b, n);
    return;
  }
#endif
  (void)avx512;
  for (int64_t i = 0; i < n; ++i) x[i] += b[i];
}

}  // namespace

bool GemmAttentionAvailable(const kernels::Context& ctx) {
#ifdef VLS_VISION_AVX512
  return kernels::IsAvx512Variant(ctx.variant()) && ctx.uses_onednn() &&
         kernels::OneDnnBf16Available();
#else
  (void)ctx;
  return false;
#endif
}

int64_t KeyBlock(int64_t L) {
  const int64_t blocks = (L + kGemmAttentionKeys - 1) / kGemmAttentionKeys;
  return (L + blocks - 1) / blocks;
}

float RowMax(const float* s, int64_t n) {
  float mx = s[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, s[i]);
  return mx;
}

float ExpRowToBf16(const float* s, int64_t n, float scale, float max, uint16_t* p) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = F32ToBf16(std::exp(scale * (s[i] - max)));
    sum += Bf16ToF32(p[i]);
  }
  return sum;
}

void PackHeadsBf16(const float* qkv, const float* b, const float* cos, const float* sin, int64_t np,
                   int64_t heads, int64_t hd, std::span<const int64_t> segments,
                   const HeadsBf16& out, const kernels::Context& ctx) {
  const int64_t Dv = heads * hd, half = hd / 2;
  const bool avx512 = kernels::IsAvx512Variant(ctx.variant());
  ctx.pool().ParallelFor(np, std::max<int64_t>(1, 4096 / Dv), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(3 * Dv));
    std::vector<uint16_t> v(static_cast<size_t>(Dv));
    for (int64_t r = r0; r < r1; ++r) {
      const auto s = std::upper_bound(segments.begin(), segments.end(), r) - segments.begin() - 1;
      const int64_t a = segments[static_cast<size_t>(s)];
      const int64_t L = segments[static_cast<size_t>(s) + 1] - a;
      // The row's key block: [k0, k0 + lk) of the segment.
      const int64_t t = r - a, KB = KeyBlock(L), k0 = t / KB * KB, lk = std::min(KB, L - k0);
#ifdef VLS_VISION_AVX512
      if (avx512) {
        PackRowAvx512(qkv + r * 3 * Dv, b, cos + r * half, sin + r * half, heads, hd, np * hd,
                      out.q + r * hd, out.k + r * hd, v.data());
        for (int64_t h = 0; h < heads; ++h) {
          uint16_t* vt = out.vt + h * np * hd + hd * (a + k0) + (t - k0);  // [hd, lk]
          for (int64_t d = 0; d < hd; ++d) vt[d * lk] = v[static_cast<size_t>(h * hd + d)];
        }
        continue;
      }
#endif
      std::copy_n(qkv + r * 3 * Dv, 3 * Dv, row.data());
      AddRowsAvx512OrScalar(row.data(), b, 3 * Dv, avx512);
      for (int64_t h = 0; h < 2 * heads; ++h) {
        ctx.ApplyRope(row.data() + h * hd, cos + r * half, sin + r * half, hd);
      }
      ToBf16(ctx, row.data() + 2 * Dv, Dv, v.data());
      for (int64_t h = 0; h < heads; ++h) {
        ToBf16(ctx, row.data() + h * hd, hd, out.q + (h * np + r) * hd);
        ToBf16(ctx, row.data() + Dv + h * hd, hd, out.k + (h * np + r) * hd);
        uint16_t* vt = out.vt + h * np * hd + hd * (a + k0) + (t - k0);  // [hd, lk]
        for (int64_t d = 0; d < hd; ++d) vt[d * lk] = v[static_cast<size_t>(h * hd + d)];
      }
    }
  });
}

Status GemmAttention(const HeadsBf16& in, int64_t np, int64_t heads, int64_t hd,
                     std::span<const int64_t> segments, float scale, float* out,
                     const kernels::Context& ctx) {
  struct Item {
    int64_t m0, rows, seg_begin, seg_len;
  };
  std::vector<Item> items;
  for (size_t s = 0; s + 1 < segments.size(); ++s) {
    const int64_t a = segments[s], e = segments[s + 1];
    // Equal row blocks of at most kGemmAttentionRows (no small tail block).
    const int64_t blocks = (e - a + kGemmAttentionRows - 1) / kGemmAttentionRows;
    const int64_t rows = (e - a + blocks - 1) / blocks;
    for (int64_t m0 = a; m0 < e; m0 += rows) {
      items.push_back({m0, std::min(rows, e - m0), a, e - a});
    }
  }
  const int64_t Dv = heads * hd;
  const auto n = static_cast<int64_t>(items.size()) * heads;
  std::mutex mu;
  Status failed;
  // In pieces of consecutive items (ForPieces), each costing up to 4 · rows · keys · hd.
  const double item_flops =
      4.0 * static_cast<double>(kGemmAttentionRows * hd) * static_cast<double>(np);
  ForPieces(n, item_flops, ctx.pool().threads(), [&](int64_t p0, int64_t p1) {
    ctx.pool().ParallelFor(p1 - p0, 1, [&](int64_t j0, int64_t j1, int thread) {
      kernels::ScratchArena& arena = ctx.scratch(thread);
      for (int64_t it = p0 + j0; it < p0 + j1; ++it) {
        // Head-major: a participant's consecutive items share the head's K and V (in L2).
        const auto nb = static_cast<int64_t>(items.size());
        const Item& b = items[static_cast<size_t>(it % nb)];
        const int64_t h = it / nb, L = b.seg_len, R = b.rows, KB = KeyBlock(L);
        // [R, KB] f32 scores, [R, KB] BF16 probabilities, [R, hd] f32 block output and
        // accumulator, [R] running max, sum and rescale factor.
        const auto align = [](size_t x) { return (x + 63) / 64 * 64; };
        const size_t sb = align(static_cast<size_t>(R * KB) * 4),
                     pb = align(static_cast<size_t>(R * KB) * 2),
                     ob = align(static_cast<size_t>(R * hd) * 4),
                     rb = align(static_cast<size_t>(R) * 4);
        auto* base = static_cast<char*>(arena.attention.Reserve(sb + pb + 2 * ob + 3 * rb));
        auto* scores = reinterpret_cast<float*>(base);
        auto* p = reinterpret_cast<uint16_t*>(base + sb);
        auto* o = reinterpret_cast<float*>(base + sb + pb);
        auto* acc = reinterpret_cast<float*>(base + sb + pb + ob);
        auto* mx = reinterpret_cast<float*>(base + sb + pb + 2 * ob);
        auto* sum = mx + rb / 4;
        auto* alpha = sum + rb / 4;
        Status s;
        for (int64_t k0 = 0; k0 < L && s.ok(); k0 += KB) {
          const int64_t lk = std::min(KB, L - k0);
          const kernels::Matrix k{.dtype = DType::kBF16,
                                  .data = in.k + (h * np + b.seg_begin + k0) * hd,
                                  .rows = lk,
                                  .cols = hd};
          const kernels::Matrix vt{.dtype = DType::kBF16,
                                   .data = in.vt + h * np * hd + hd * (b.seg_begin + k0),
                                   .rows = hd,
                                   .cols = lk};
          s = kernels::OneDnnMatMulBf16Columns(in.q + (h * np + b.m0) * hd, R, hd, k, 0, lk, scores,
                                               &arena);
          if (!s.ok()) break;
          for (int64_t r = 0; r < R; ++r) {
            const float* sr = scores + r * lk;
#ifdef VLS_VISION_AVX512
            const float m = k0 == 0 ? RowMaxAvx512(sr, lk) : std::max(mx[r], RowMaxAvx512(sr, lk));
            const float e = ExpRowToBf16Avx512(sr, lk, scale, m, p + r * lk);
#else
          const float m = k0 == 0 ? RowMax(sr, lk) : std::max(mx[r], RowMax(sr, lk));
          const float e = ExpRowToBf16(sr, lk, scale, m, p + r * lk);
#endif
            alpha[r] = k0 == 0 ? 0.0f : std::exp(scale * (mx[r] - m));
            sum[r] = k0 == 0 ? e : sum[r] * alpha[r] + e;
            mx[r] = m;
          }
          s = kernels::OneDnnMatMulBf16Columns(p, R, lk, vt, 0, hd, k0 == 0 ? acc : o, &arena);
          if (!s.ok() || k0 == 0) continue;
          for (int64_t r = 0; r < R; ++r) {
            for (int64_t d = 0; d < hd; ++d)
              acc[r * hd + d] = acc[r * hd + d] * alpha[r] + o[r * hd + d];
          }
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failed = std::move(s);
          return;
        }
        for (int64_t r = 0; r < R; ++r) {
          float* dst = out + (b.m0 + r) * Dv + h * hd;
          const float f = 1.0f / sum[r];
          for (int64_t d = 0; d < hd; ++d) dst[d] = acc[r * hd + d] * f;
        }
      }
    });
  });
  return failed;
}

}  // namespace vls::vision_internal
