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
  // [T, D] keys and values of one KV head, key t at k + KeyOffset(tile, t): f32 in k and v, or
  // BF16 in k_bf16 and v_bf16 (the other pair null).
  const float* k = nullptr;
  const float* v = nullptr;
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
  // k_bf16 is in key tiles (model/kv_cache.h: per 16 keys, [D/2, 16] BF16 column pairs).
  // Only kernels with attention_bf16_products (kernels/dispatch.h) take them.
  bool k_tiles = false;
  // Paged keys and values (model/kv_pool.h), null for a contiguous [T, D] head: key t is at
  // element pages[t / page_keys]·page_stride + (t % page_keys)·D. REQUIRES: page_keys a multiple
  // of the kernels' key block (64), so that no key block crosses a page.
  const int32_t* pages = nullptr;
  int64_t page_keys = 0, page_stride = 0;
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

// Element offset of key t's row (or of the key tile starting at t, t % 16 == 0) in the tile's
// keys and values; the rows of a key block [t, t + 64) with t % 64 == 0 follow it contiguously.
inline int64_t KeyOffset(const AttentionTile& w, int64_t t) {
  if (w.pages == nullptr) return t * w.head_dim;
  return static_cast<int64_t>(w.pages[t / w.page_keys]) * w.page_stride +
         (t % w.page_keys) * w.head_dim;
}

// Keys of the key block from t0: at most `most`, ending at T and at the end of t0's page.
inline int64_t KeyBlockLength(const AttentionTile& w, int64_t t0, int64_t T, int64_t most) {
  int64_t n = T - t0 < most ? T - t0 : most;
  if (w.pages != nullptr && w.page_keys - t0 % w.page_keys < n) n = w.page_keys - t0 % w.page_keys;
  return n;
}

// The tile of the key block from t0 (which lies in one page): contiguous keys and values from
// the block's first key, key t0 + j at + j·D.
inline AttentionTile BlockTile(const AttentionTile& w, int64_t t0) {
  AttentionTile b = w;
  const int64_t at = KeyOffset(w, t0);
  if (w.k_bf16 != nullptr) {
    b.k_bf16 = w.k_bf16 + at;
    b.v_bf16 = w.v_bf16 + at;
  } else {
    b.k = w.k + at;
    b.v = w.v + at;
  }
  b.pages = nullptr;
  return b;
}

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
