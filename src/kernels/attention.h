// The attention kernel entry of the optimised variants (KernelVariant::attention).
//
// One call is one work item of the model's attention: a block of query rows of one sequence,
// all `group` query heads that share one KV head, against that head's contiguous keys and
// values. It uses online softmax over key blocks (running max, running sum, rescaled
// accumulator), so nothing of size [rows, T] is materialised. Its working state lives in the
// calling participant's scratch buffer (kernels/scratch.h), reused from call to call.
#ifndef VLSTACK_KERNELS_ATTENTION_H_
#define VLSTACK_KERNELS_ATTENTION_H_

#include <cstdint>

namespace vls::kernels {

class ScratchBuffer;

struct AttentionTile {
  // Query head j of row r (j < group) is q[r·q_row_stride + j·D .. + D).
  const float* q = nullptr;
  int64_t q_row_stride = 0;
  // [T, D] keys and values of one KV head, key t at k + t·D: f32 in k and v, or BF16 in
  // k_bf16 and v_bf16 (the other pair null).
  const float* k = nullptr;
  const float* v = nullptr;
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
  // k_bf16 is in key tiles (model/kv_cache.h: per 16 keys, [D/2, 16] BF16 column pairs).
  // Only kernels with attention_bf16_products (kernels/dispatch.h) take them.
  bool k_tiles = false;
  // [rows] row r attends keys [first, last[r]] (causal by physical index; `first` > 0 when
  // one row's keys are split over several work items).
  const int32_t* last = nullptr;
  int32_t first = 0;
  int64_t rows = 0, group = 0, head_dim = 0;
  float scale = 1.0f;
  // Same layout as q: out[r·out_row_stride + j·D .. + D) = softmax(scale·q·Kᵀ)·V over the
  // tile's keys (0 for a query with none: first > last[r]).
  float* out = nullptr;
  int64_t out_row_stride = 0;
  // Optional [rows, group]: the log of the softmax denominator over the tile's keys,
  // lse = max + log Σ exp(s - max) (-inf for a query with none), so the partial results of
  // a split key range combine exactly: out = Σ_p exp(lse_p - LSE)·out_p, LSE = log Σ exp(lse_p).
  float* lse = nullptr;
};

namespace avx512_internal {
// The AVX-512 implementation, shared by the "avx512", "avx512vnni" and "avx512bf16" variants.
void Attention(const AttentionTile& tile, ScratchBuffer& scratch);
// The "avx512bf16" variant's: over a BF16 cache with K in key tiles (k_tiles), queries and
// softmax weights rounded to BF16 and multiplied with vdpbf16ps (attention_avx512_bf16.cc);
// otherwise Attention.
void AttentionBf16(const AttentionTile& tile, ScratchBuffer& scratch);
}  // namespace avx512_internal

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_ATTENTION_H_
