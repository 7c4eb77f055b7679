#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"

namespace vls {

namespace {

// Query rows per blocked work item: enough that a K/V block in L1/L2 serves
// kRowBlock·group queries in prefill, few enough that prefill still has many work items.
constexpr int64_t kRowBlock = 16;

// A run of consecutive rows [m0, m0 + rows) of one cache.
struct RowBlock {
  int64_t m0 = 0, rows = 0;
  int64_t cost = 0;  // Σ keys attended, to schedule the largest first
};

std::vector<RowBlock> SplitRows(std::span<const ForwardRow> rows) {
  std::vector<RowBlock> blocks;
  for (int64_t m = 0; m < static_cast<int64_t>(rows.size()); ++m) {
    const ForwardRow& r = rows[static_cast<size_t>(m)];
    if (blocks.empty() || blocks.back().rows == kRowBlock ||
        rows[static_cast<size_t>(blocks.back().m0)].cache != r.cache) {
      blocks.push_back({m, 0, 0});
    }
    ++blocks.back().rows;
    blocks.back().cost += static_cast<int64_t>(r.index) + 1;
  }
  // ParallelFor hands out chunks in order: the costly ones first leave cheap ones to balance.
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const RowBlock& a, const RowBlock& b) { return a.cost > b.cost; });
  return blocks;
}

}  // namespace

void Attend(const kernels::Context& ctx, int layer, const AttentionShape& shape, const float* q,
            std::span<const ForwardRow> rows, float* out) {
  if (ctx.variant().attention != nullptr) {
    BlockedAttend(ctx, layer, shape, q, rows, out);
  } else {
    ReferenceAttend(ctx, layer, shape, q, rows, out);
  }
}

void ReferenceAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                     const float* q, std::span<const ForwardRow> rows, float* out) {
  const int64_t M = static_cast<int64_t>(rows.size());
  const int64_t nh = shape.heads, D = shape.head_dim, group = nh / shape.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Every (row, head) pair is independent: split them over the pool.
  ctx.pool().ParallelFor(M * nh, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;  // [T]
    std::vector<float> wk, wv;  // [T, D] widened keys and values of a BF16 cache
    for (int64_t mh = begin; mh < end; ++mh) {
      const int64_t m = mh / nh, h = mh % nh;
      const ForwardRow& r = rows[static_cast<size_t>(m)];
      const int64_t T = static_cast<int64_t>(r.index) + 1;  // causal: keys [0, index]
      scores.resize(static_cast<size_t>(T));
      const int kvh = static_cast<int>(h / group);
      const float* k = nullptr;
      const float* v = nullptr;
      const KvCache::HeadView view = r.cache->Head(layer, kvh);
      if (r.cache->dtype() == KvDType::kF32 && T <= view.page_keys) {  // one block: contiguous
        k = reinterpret_cast<const float*>(view.k) + view.pages[0] * view.page_stride;
        v = reinterpret_cast<const float*>(view.v) + view.pages[0] * view.page_stride;
      } else {
        wk.resize(static_cast<size_t>(T * D));
        wv.resize(wk.size());
        r.cache->ReadHead(false, layer, kvh, 0, T * D, wk.data());
        r.cache->ReadHead(true, layer, kvh, 0, T * D, wv.data());
        k = wk.data();
        v = wv.data();
      }
      ctx.Scores(q + (m * nh + h) * D, k, D, T, D, scale, scores.data());
      kernels::Softmax(scores.data(), T);
      ctx.WeightedSum(scores.data(), v, D, T, D, out + (m * nh + h) * D);
    }
  });
}

void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out) {
  BlockedAttend(ctx, layer, shape, q, rows, out, kAttentionRangeKeys);
}

void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out,
                   int64_t range_keys) {
  // Key tiles are read by kernels with BF16 products only; any other kernel reads them back
  // through the cache (the reference path).
  if (!ctx.variant().attention_bf16_products &&
      std::any_of(rows.begin(), rows.end(),
                  [](const ForwardRow& r) { return r.cache->key_tiles(); })) {
    ReferenceAttend(ctx, layer, shape, q, rows, out);
    return;
  }
  const int64_t nh = shape.heads, nkv = shape.kv_heads, D = shape.head_dim;
  const int64_t group = nh / nkv;
  const auto M = static_cast<int64_t>(rows.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::vector<RowBlock> blocks = SplitRows(rows);
  std::vector<int32_t> last(rows.size());  // [M] last key of each row
  for (size_t m = 0; m < rows.size(); ++m) last[m] = rows[m].index;
  const int64_t keys = *std::max_element(last.begin(), last.end()) + 1;
  range_keys = std::max<int64_t>(range_keys, 1);
  const int64_t ranges = (keys + range_keys - 1) / range_keys;
  // With ranges > 1 every (row block, KV head) item is cut at the fixed key positions
  // p·range_keys; each part writes its normalised partial output and log-sum-exp, combined
  // below. The boundaries depend on nothing but range_keys, so a row's result does not depend
  // on the other rows of the call (batch invariance: a row decoded alone, in a ragged batch or
  // in a speculative verify pass rounds the same).
  thread_local std::vector<float> part_out, part_lse;  // [ranges, M, nh, D], [ranges, M, nh]
  std::vector<int32_t> range_last;                     // [ranges, M]
  if (ranges > 1) {
    part_out.resize(static_cast<size_t>(ranges * M * nh * D));
    part_lse.resize(static_cast<size_t>(ranges * M * nh));
    // Range p of row m: keys [p·range_keys, min(last, (p + 1)·range_keys - 1)] (below the
    // first key when the row has none there).
    range_last.resize(static_cast<size_t>(ranges * M));
    for (int64_t p = 0; p < ranges; ++p) {
      for (int64_t m = 0; m < M; ++m) {
        range_last[static_cast<size_t>(p * M + m)] = static_cast<int32_t>(
            std::min<int64_t>(last[static_cast<size_t>(m)], (p + 1) * range_keys - 1));
      }
    }
  }
  float* const part_out_data = part_out.data();
  float* const part_lse_data = part_lse.data();
  const auto items = static_cast<int64_t>(blocks.size()) * nkv * ranges;
  ctx.pool().ParallelFor(items, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t range = it % ranges;
      const RowBlock& b = blocks[static_cast<size_t>(it / ranges / nkv)];
      const int g = static_cast<int>(it / ranges % nkv);
      const KvCache& cache = *rows[static_cast<size_t>(b.m0)].cache;
      kernels::AttentionTile tile;
      tile.q = q + (b.m0 * nh + g * group) * D;
      tile.q_row_stride = nh * D;
      const KvCache::HeadView view = cache.Head(layer, g);
      if (cache.dtype() == KvDType::kF32) {
        tile.k = reinterpret_cast<const float*>(view.k);
        tile.v = reinterpret_cast<const float*>(view.v);
      } else {
        tile.k_bf16 = reinterpret_cast<const uint16_t*>(view.k);
        tile.k_tiles = cache.key_tiles();
        tile.v_bf16 = reinterpret_cast<const uint16_t*>(view.v);
      }
      tile.pages = view.pages;
      tile.page_keys = view.page_keys;
      tile.page_stride = view.page_stride;
      tile.last = last.data() + b.m0;
      tile.rows = b.rows;
      tile.group = group;
      tile.head_dim = D;
      tile.scale = scale;
      tile.out = out + (b.m0 * nh + g * group) * D;
      tile.out_row_stride = nh * D;
      if (ranges > 1) {
        tile.first = static_cast<int32_t>(range * range_keys);
        tile.last = range_last.data() + range * M + b.m0;
        tile.out = part_out_data + ((range * M + b.m0) * nh + g * group) * D;
        // The kernel writes lse densely as [rows, group]: this item's run is the g-th of the
        // block's b.rows·nh floats of this range.
        tile.lse = part_lse_data + (range * M + b.m0) * nh + g * group * b.rows;
      }
      ctx.variant().attention(tile, ctx.scratch(thread).attention);
    }
  });
  if (ranges == 1) return;
  // Combine per (row, head): out = Σ_p w_p·out_p, w_p = exp(lse_p - max) / Σ exp(lse_q - max).
  // Range 0 holds key 0, which every row attends, so max is finite; a row with keys in one
  // range only gets w = 1, total = 1: its partial output unchanged, as if never split.
  for (const RowBlock& b : blocks) {
    for (int64_t r = 0; r < b.rows; ++r) {
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / group, j = h % group;
        auto lse = [&](int64_t p) {
          return part_lse_data[(p * M + b.m0) * nh + g * group * b.rows + r * group + j];
        };
        float mx = lse(0);
        for (int64_t p = 1; p < ranges; ++p) mx = std::max(mx, lse(p));
        float* o = out + ((b.m0 + r) * nh + h) * D;
        std::fill_n(o, D, 0.0f);
        float total = 0.0f;
        for (int64_t p = 0; p < ranges; ++p) {
          const float w = std::exp(lse(p) - mx);  // 0 for a range with no key of this row
          if (w == 0.0f) continue;
          total += w;
          const float* po = part_out_data + ((p * M + b.m0 + r) * nh + h) * D;
          for (int64_t d = 0; d < D; ++d) o[d] += w * po[d];
        }
        const float inv = 1.0f / total;
        for (int64_t d = 0; d < D; ++d) o[d] *= inv;
      }
    }
  }
}

}  // namespace vls
