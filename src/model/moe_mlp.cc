#include "model/moe_mlp.h"

#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/moe.h"

namespace vls {

namespace {

// Each scratch section starts on 16 floats (64 bytes), as the matmul kernels like their rows.
constexpr int64_t kAlignFloats = 16;
int64_t Aligned(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// The sections of MoeMlp's scratch, in order.
struct MoeScratch {
  float* logits = nullptr;     // [M, E]
  int32_t* experts = nullptr;  // [M, k]
  float* weights = nullptr;    // [M, k]
  int32_t* pos = nullptr;      // [M, k]: the gathered row of (r, j)
  int32_t* source = nullptr;   // [M·k]: the input row of gathered row p
  int32_t* offsets = nullptr;  // [E + 1]: expert e's gathered rows are [offsets[e], offsets[e+1])
  float* gathered = nullptr;   // [M·k, H]: the input rows, later the down outputs
  float* gate_up = nullptr;    // [M·k, 2·I]
  float* act = nullptr;        // [M·k, I]
  int64_t floats = 0;
};

MoeScratch Layout(const MoeConfig& moe, int64_t H, int64_t M, float* base) {
  const int64_t E = moe.experts, k = moe.top_k, I = moe.expert_intermediate, R = M * k;
  MoeScratch s;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    float* p = base != nullptr ? base + at : nullptr;
    at += Aligned(n);
    return p;
  };
  static_assert(sizeof(int32_t) == sizeof(float));
  s.logits = take(M * E);
  s.experts = reinterpret_cast<int32_t*>(take(R));
  s.weights = take(R);
  s.pos = reinterpret_cast<int32_t*>(take(R));
  s.source = reinterpret_cast<int32_t*>(take(R));
  s.offsets = reinterpret_cast<int32_t*>(take(E + 1));
  s.gathered = take(R * H);
  s.gate_up = take(R * 2 * I);
  s.act = take(R * I);
  s.floats = at;
  return s;
}

}  // namespace

int64_t MoeScratchFloats(const MoeConfig& moe, int64_t H, int64_t M) {
  return Layout(moe, H, M, nullptr).floats;
}

void MoeMlp(const kernels::Context& ctx, const MoeConfig& moe, const PreparedLayer& P,
            const float* m, int64_t M, int64_t H, float* scratch, float* out,
            const MoeRoutingCallback& on_routing) {
  if (M <= 0) return;
  const int64_t E = moe.experts, k = moe.top_k, I = moe.expert_intermediate, R = M * k;
  const MoeScratch s = Layout(moe, H, M, scratch);
  ThreadPool& pool = ctx.pool();
  // Routing: f32 logits against the F32 router, then softmax and top-k per row.
  ctx.MatMul(m, M, H, P.router, s.logits);
  pool.ParallelFor(M, 16, [&](int64_t b, int64_t e) {
    kernels::RouteTopK(s.logits + b * E, e - b, E, static_cast<int>(k), moe.norm_topk_prob,
                       s.experts + b * k, s.weights + b * k);
  });
  if (on_routing) on_routing(s.experts, s.weights);
  // Counting sort of the (row, j) pairs by expert; within an expert rows ascend.
  std::fill_n(s.offsets, E + 1, 0);
  for (int64_t i = 0; i < R; ++i) ++s.offsets[s.experts[i] + 1];
  for (int64_t e = 0; e < E; ++e) s.offsets[e + 1] += s.offsets[e];
  std::vector<int32_t> cursor(s.offsets, s.offsets + E);
  for (int64_t i = 0; i < R; ++i) {
    const int32_t p = cursor[static_cast<size_t>(s.experts[i])]++;
    s.pos[i] = p;
    s.source[p] = static_cast<int32_t>(i / k);
  }
  // gate_up[p] = m[source[p]] · Gate_up_eᵀ for every used expert e, in one grouped product.
  std::vector<int64_t> used;  // the experts with rows, ascending
  for (int64_t e = 0; e < E; ++e) {
    if (s.offsets[e + 1] > s.offsets[e]) used.push_back(e);
  }
  std::vector<kernels::GroupedProduct> products(used.size());
  for (size_t i = 0; i < used.size(); ++i) {
    const int64_t e = used[i], p0 = s.offsets[e], n = s.offsets[e + 1] - p0;
    products[i] = {m, n, &P.expert_gate_up[static_cast<size_t>(e)], s.gate_up + p0 * 2 * I,
                   s.source + p0};
  }
  // Quantized experts gather their rows from m in the product, each row of m quantized once
  // (not once per expert it goes to); otherwise gathered[p] = m[source[p]] here.
  if (!kernels::GroupedConvertsSourceOnce(products)) {
    pool.ParallelFor(R, 16, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) std::copy_n(m + s.source[p] * H, H, s.gathered + p * H);
    });
    for (size_t i = 0; i < used.size(); ++i) {
      products[i].x = s.gathered + s.offsets[used[i]] * H;
      products[i].rows = nullptr;
    }
  }
  ctx.MatMulGrouped(products, H);
  // act[p] = SiLU(gate) · up, in items of kSiluCols columns of one row (as the dense MLP).
  constexpr int64_t kSiluCols = 512;
  const int64_t parts = (I + kSiluCols - 1) / kSiluCols;
  pool.ParallelFor(R * parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t p = it / parts, c0 = (it % parts) * kSiluCols, n = std::min(kSiluCols, I - c0);
      float* g = s.act + p * I + c0;
      std::copy_n(s.gate_up + p * 2 * I + c0, n, g);
      ctx.SiluMul(g, s.gate_up + p * 2 * I + I + c0, n);
    }
  });
  // down[p] (into gathered, whose input rows are dead) = act[p] · Down_eᵀ.
  for (size_t i = 0; i < used.size(); ++i) {
    const int64_t e = used[i], p0 = s.offsets[e], n = s.offsets[e + 1] - p0;
    products[i] = {s.act + p0 * I, n, &P.expert_down[static_cast<size_t>(e)], s.gathered + p0 * H,
                   nullptr};
  }
  ctx.MatMulGrouped(products, I);
  // out[r] = Σ_j w[r, j] · down[pos[r, j]], j ascending (fused multiply-adds, the same bits in
  // every kernel variant), one row per item.
  pool.ParallelFor(M, 4, [&](int64_t b, int64_t e) {
    std::vector<const float*> rows(static_cast<size_t>(k));
    for (int64_t r = b; r < e; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        rows[static_cast<size_t>(j)] = s.gathered + static_cast<int64_t>(s.pos[r * k + j]) * H;
      }
      ctx.WeightedRows(s.weights + r * k, rows.data(), k, H, out + r * H);
    }
  });
}

}  // namespace vls
