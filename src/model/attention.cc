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
// A key range is split only while every part keeps at least this many keys (the combine
// costs O(D) per part and query head), into at most kMaxKeySplits parts.
constexpr int64_t kMinSplitKeys = 512;
constexpr int64_t kMaxKeySplits = 16;

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
      if (r.cache->dtype() == KvDType::kF32) {
        k = r.cache->k_head(layer, kvh);
        v = r.cache->v_head(layer, kvh);
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

int64_t KeySplits(int64_t items, int threads, int64_t keys) {
  if (items >= 2 * static_cast<int64_t>(threads)) return 1;  // enough work items already
  const int64_t want = (2 * static_cast<int64_t>(threads) + items - 1) / items;
  return std::clamp<int64_t>(std::min(want, keys / kMinSplitKeys), 1, kMaxKeySplits);
}

void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out) {
  int64_t keys = 0;
  for (const ForwardRow& r : rows) keys = std::max<int64_t>(keys, int64_t{r.index} + 1);
  const int64_t blocks = static_cast<int64_t>(SplitRows(rows).size());
  BlockedAttend(ctx, layer, shape, q, rows, out,
                KeySplits(blocks * shape.kv_heads, ctx.pool().threads(), keys));
}

void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out, int64_t splits) {
  const int64_t nh = shape.heads, nkv = shape.kv_heads, D = shape.head_dim;
  const int64_t group = nh / nkv;
  const auto M = static_cast<int64_t>(rows.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::vector<RowBlock> blocks = SplitRows(rows);
  std::vector<int32_t> last(rows.size());  // [M] last key of each row
  for (size_t m = 0; m < rows.size(); ++m) last[m] = rows[m].index;
  const int32_t keys = *std::max_element(last.begin(), last.end()) + 1;
  splits = std::clamp<int64_t>(splits, 1, keys);
  // With splits > 1 every (row block, KV head) item is cut into `splits` key ranges of whole
  // key blocks; each writes its normalised partial output and log-sum-exp, combined below.
  std::vector<float> part_out, part_lse;  // [splits, M, nh, D], [splits, M, nh]
  if (splits > 1) {
    part_out.resize(static_cast<size_t>(splits * M * nh * D));
    part_lse.resize(static_cast<size_t>(splits * M * nh));
  }
  const auto span_keys = static_cast<int32_t>((keys + splits - 1) / splits);
  // [splits, M] each split's last key per row: [first, min(last, first + span_keys - 1)]
  // (below first when the row has no key there).
  std::vector<int32_t> split_last(static_cast<size_t>(splits * M));
  for (int64_t p = 0; p < splits; ++p) {
    for (int64_t m = 0; m < M; ++m) {
      split_last[static_cast<size_t>(p * M + m)] =
          std::min(last[static_cast<size_t>(m)], static_cast<int32_t>((p + 1) * span_keys - 1));
    }
  }
  const auto items = static_cast<int64_t>(blocks.size()) * nkv * splits;
  ctx.pool().ParallelFor(items, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t split = it % splits;
      const RowBlock& b = blocks[static_cast<size_t>(it / splits / nkv)];
      const int g = static_cast<int>(it / splits % nkv);
      const KvCache& cache = *rows[static_cast<size_t>(b.m0)].cache;
      kernels::AttentionTile tile;
      tile.q = q + (b.m0 * nh + g * group) * D;
      tile.q_row_stride = nh * D;
      if (cache.dtype() == KvDType::kF32) {
        tile.k = cache.k_head(layer, g);
        tile.v = cache.v_head(layer, g);
      } else {
        tile.k_bf16 = cache.k_head_bf16(layer, g);
        tile.v_bf16 = cache.v_head_bf16(layer, g);
      }
      tile.last = last.data() + b.m0;
      tile.rows = b.rows;
      tile.group = group;
      tile.head_dim = D;
      tile.scale = scale;
      tile.out = out + (b.m0 * nh + g * group) * D;
      tile.out_row_stride = nh * D;
      if (splits > 1) {
        tile.first = static_cast<int32_t>(split) * span_keys;
        tile.last = split_last.data() + split * M + b.m0;
        tile.out = part_out.data() + ((split * M + b.m0) * nh + g * group) * D;
        // lse [rows, group] of this tile: heads g·group.. of rows b.m0.., row stride nh.
        // The kernel writes it densely, so give it its own [rows, group] run per item.
        tile.lse = part_lse.data() + (split * M + b.m0) * nh + g * group * b.rows;
      }
      ctx.variant().attention(tile, ctx.scratch(thread).attention);
    }
  });
  if (splits == 1) return;
  // Combine per (row, head): out = Σ_p w_p·out_p, w_p = exp(lse_p - max) / Σ exp(lse_q - max).
  // Split 0 holds key 0, which every row attends, so max is finite.
  for (const RowBlock& b : blocks) {
    for (int64_t r = 0; r < b.rows; ++r) {
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / group, j = h % group;
        auto lse = [&](int64_t p) {
          return part_lse[static_cast<size_t>((p * M + b.m0) * nh + g * group * b.rows + r * group +
                                              j)];
        };
        float mx = lse(0);
        for (int64_t p = 1; p < splits; ++p) mx = std::max(mx, lse(p));
        float* o = out + ((b.m0 + r) * nh + h) * D;
        std::fill_n(o, D, 0.0f);
        float total = 0.0f;
        for (int64_t p = 0; p < splits; ++p) {
          const float w = std::exp(lse(p) - mx);  // 0 for a split with no key of this row
          if (w == 0.0f) continue;
          total += w;
          const float* po = part_out.data() + ((p * M + b.m0 + r) * nh + h) * D;
          for (int64_t d = 0; d < D; ++d) o[d] += w * po[d];
        }
        const float inv = 1.0f / total;
        for (int64_t d = 0; d < D; ++d) o[d] *= inv;
      }
    }
  }
}

}  // namespace vls
