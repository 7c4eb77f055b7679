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
  return &ctx.variant() != &kernels::ReferenceVariant() && ctx.uses_onednn() &&
         kernels::OneDnnBf16Available();
#else
  (void)ctx;
  return false;
#endif
}

float SoftmaxRowToBf16(const float* s, int64_t n, float scale, uint16_t* p) {
  float mx = s[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, s[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = F32ToBf16(std::exp(scale * (s[i] - mx)));
    sum += Bf16ToF32(p[i]);
  }
  return sum;
}

void PackHeadsBf16(const float* qkv, const float* b, const float* cos, const float* sin, int64_t np,
                   int64_t heads, int64_t hd, std::span<const int64_t> segments,
                   const HeadsBf16& out, const kernels::Context& ctx) {
  const int64_t Dv = heads * hd, half = hd / 2;
  const bool avx512 = &ctx.variant() != &kernels::ReferenceVariant();
  ctx.pool().ParallelFor(np, std::max<int64_t>(1, 4096 / Dv), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(3 * Dv));
    std::vector<uint16_t> v(static_cast<size_t>(Dv));
    for (int64_t r = r0; r < r1; ++r) {
      const auto s = std::upper_bound(segments.begin(), segments.end(), r) - segments.begin() - 1;
      const int64_t a = segments[static_cast<size_t>(s)];
      const int64_t L = segments[static_cast<size_t>(s) + 1] - a;
#ifdef VLS_VISION_AVX512
      if (avx512) {
        PackRowAvx512(qkv + r * 3 * Dv, b, cos + r * half, sin + r * half, heads, hd, np * hd,
                      out.q + r * hd, out.k + r * hd, v.data());
        for (int64_t h = 0; h < heads; ++h) {
          uint16_t* vt = out.vt + h * np * hd + hd * a + (r - a);  // [hd, L]
          for (int64_t d = 0; d < hd; ++d) vt[d * L] = v[static_cast<size_t>(h * hd + d)];
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
        uint16_t* vt = out.vt + h * np * hd + hd * a + (r - a);  // [hd, L]
        for (int64_t d = 0; d < hd; ++d) vt[d * L] = v[static_cast<size_t>(h * hd + d)];
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
    for (int64_t m0 = a; m0 < e; m0 += rows)
      items.push_back({m0, std::min(rows, e - m0), a, e - a});
  }
  const int64_t Dv = heads * hd;
  const auto n = static_cast<int64_t>(items.size()) * heads;
  std::mutex mu;
  Status failed;
  ctx.pool().ParallelFor(n, 1, [&](int64_t i0, int64_t i1, int thread) {
    kernels::ScratchArena& arena = ctx.scratch(thread);
    for (int64_t it = i0; it < i1; ++it) {
      const Item& b = items[static_cast<size_t>(it / heads)];
      const int64_t h = it % heads, L = b.seg_len, R = b.rows;
      // [R, L] f32 scores, [R, L] BF16 probabilities, [R, hd] f32 output.
      const size_t sb = static_cast<size_t>(R * L) * 4,
                   pb = (static_cast<size_t>(R * L) * 2 + 63) / 64 * 64;
      auto* base =
          static_cast<char*>(arena.attention.Reserve(sb + pb + static_cast<size_t>(R * hd) * 4));
      auto* scores = reinterpret_cast<float*>(base);
      auto* p = reinterpret_cast<uint16_t*>(base + sb);
      auto* o = reinterpret_cast<float*>(base + sb + pb);
      const kernels::Matrix k{
          .dtype = DType::kBF16, .data = in.k + (h * np + b.seg_begin) * hd, .rows = L, .cols = hd};
      const kernels::Matrix vt{.dtype = DType::kBF16,
                               .data = in.vt + h * np * hd + hd * b.seg_begin,
                               .rows = hd,
                               .cols = L};
      Status s = kernels::OneDnnMatMulBf16Columns(in.q + (h * np + b.m0) * hd, R, hd, k, 0, L,
                                                  scores, &arena);
      if (s.ok()) {
        std::vector<float> inv(static_cast<size_t>(R));
        for (int64_t r = 0; r < R; ++r) {
#ifdef VLS_VISION_AVX512
          const float sum = SoftmaxRowToBf16Avx512(scores + r * L, L, scale, p + r * L);
#else
          const float sum = SoftmaxRowToBf16(scores + r * L, L, scale, p + r * L);
#endif
          inv[static_cast<size_t>(r)] = 1.0f / sum;
        }
        s = kernels::OneDnnMatMulBf16Columns(p, R, L, vt, 0, hd, o, &arena);
        if (s.ok()) {
          for (int64_t r = 0; r < R; ++r) {
            float* dst = out + (b.m0 + r) * Dv + h * hd;
            const float f = inv[static_cast<size_t>(r)];
            for (int64_t d = 0; d < hd; ++d) dst[d] = o[r * hd + d] * f;
          }
        }
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failed = std::move(s);
        return;
      }
    }
  });
  return failed;
}

}  // namespace vls::vision_internal
