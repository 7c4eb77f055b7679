// The attention core of a decoder layer, after the Q/K/V projections, q/k RMSNorm, RoPE and
// the K/V writes into each row's cache (Qwen3Model::Attention): causal grouped-query attention
// of every row over its cache (keys [0, index]).
//
// Two paths compute the same function:
//   reference: per (row, query head) a [T] score row, softmax, weighted sum of V (the plain
//              algorithm; the test oracle).
//   blocked:   per (block of rows of one cache, KV head) work item, all query heads of the GQA
//              group together with online softmax over key blocks (kernels/attention.h), so
//              each K/V row is read once per work item and no [T] row is materialised.
// Attend takes the blocked path when the context's kernel variant has an attention entry.
#ifndef VLSTACK_MODEL_ATTENTION_H_
#define VLSTACK_MODEL_ATTENTION_H_

#include <cstdint>
#include <span>

#include "kernels/dispatch.h"
#include "model/qwen3_model.h"

namespace vls {

struct AttentionShape {
  int64_t heads = 0;     // nh query heads
  int64_t kv_heads = 0;  // nkv; REQUIRES: heads % kv_heads == 0
  int64_t head_dim = 0;  // D
};

// out[M, nh, D] = softmax(q·Kᵀ/√D)·V per row and query head, query head h reading KV head
// h / (nh / nkv) of rows[m].cache for keys [0, rows[m].index]. q: [M, nh, D].
// REQUIRES: every row's cache holds keys [0, index] of `layer` (written first).
void Attend(const kernels::Context& ctx, int layer, const AttentionShape& shape, const float* q,
            std::span<const ForwardRow> rows, float* out);

// The two paths of Attend, for tests.
void ReferenceAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                     const float* q, std::span<const ForwardRow> rows, float* out);
// Keys per range of BlockedAttend: each row's keys are cut at the fixed positions
// p·kAttentionRangeKeys into ranges, each range its own work item, and the partial softmax
// results are combined by their log-sum-exp (flash-decoding). One decoding row at depth
// 16,384 becomes 8 KV heads x 8 ranges = 64 items instead of 8, enough for 16 threads; the
// combine costs O(D) per range and query head against O(range·D) for the range itself.
inline constexpr int64_t kAttentionRangeKeys = 2048;

// REQUIRES: ctx.variant().attention != nullptr. Cuts keys into kAttentionRangeKeys ranges
// (above). The boundaries are fixed positions, so each row's result is independent of the
// other rows in the call (batch invariance) and of the thread count.
void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out);
// The same with another range size (tests; at least the longest row's keys: no split).
void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out,
                   int64_t range_keys);

}  // namespace vls

#endif  // VLSTACK_MODEL_ATTENTION_H_
