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
// REQUIRES: ctx.variant().attention != nullptr. Splits each row's keys into KeySplits(...)
// ranges when there are fewer (row block, KV head) work items than twice the threads (decode
// of one or a few rows at a long context): each range is its own work item and the partial
// softmax results are combined by their log-sum-exp (flash-decoding).
void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out);
// The same with the number of key ranges given (tests; 1: no split).
void BlockedAttend(const kernels::Context& ctx, int layer, const AttentionShape& shape,
                   const float* q, std::span<const ForwardRow> rows, float* out, int64_t splits);
// How many key ranges BlockedAttend cuts each item into: 1 when `items` (row blocks x KV heads)
// already keep `threads` busy, else enough for about 2 items per thread, each range at least
// 512 keys, at most 16 ranges.
int64_t KeySplits(int64_t items, int threads, int64_t keys);

}  // namespace vls

#endif  // VLSTACK_MODEL_ATTENTION_H_
