// The parts of the AVX-512 attention tile (kernels/attention.h) that its f32 form
// (attention_avx512.cc) and its AVX512-BF16 form (attention_avx512_bf16.cc) share: the work
// item's state, the online-softmax step and the final normalisation. Include only from files
// compiled with the AVX-512 flags (kernels/CMakeLists.txt).
#ifndef VLSTACK_KERNELS_ATTENTION_AVX512_INTERNAL_H_
#define VLSTACK_KERNELS_ATTENTION_AVX512_INTERNAL_H_

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"

namespace vls::kernels::avx512_attention {

inline constexpr int64_t kKeyBlock = 64;
// Keys and values are prefetched this far ahead of the key block being scored.
inline constexpr int64_t kPrefetchKeys = kKeyBlock;
// Score rows have room for a whole last key tile past kKeyBlock.
inline constexpr int64_t kScoreStride = kKeyBlock + 16;

inline __mmask16 TailMask(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffffu : left <= 0 ? 0u : (1u << left) - 1u);
}

// Prefetches keys [t, t + n) of a [T, D] head (clipped to T) into L1: the rows of one head are
// contiguous, but a hardware prefetcher restarts at every 4 KiB page (8 f32 keys at D = 128).
template <typename KV>
void PrefetchRows(const KV* base, int64_t t, int64_t n, int64_t T, int64_t D) {
  constexpr int64_t kLine = 64 / sizeof(KV);  // elements per cache line
  const int64_t end = std::min(T, t + n) * D;
  for (int64_t i = t * D; i < end; i += kLine)
    _mm_prefetch(reinterpret_cast<const char*>(base + i), _MM_HINT_T0);
}

// Runs f(i, QueryRows<QR>{}) over queries [0, nq) in tiles of QR = 4, then a tile of the
// remainder.
template <int QR>
struct QueryRows {
  static constexpr int kRows = QR;
};
template <typename Fn>
void ForQueryTiles(int64_t nq, const Fn& f) {
  int64_t i = 0;
  for (; i + 4 <= nq; i += 4) f(i, QueryRows<4>{});
  switch (nq - i) {
    case 1: f(i, QueryRows<1>{}); break;
    case 2: f(i, QueryRows<2>{}); break;
    case 3: f(i, QueryRows<3>{}); break;
    default: break;
  }
}

// 64-byte-aligned sizes, so every array of the state starts on a cache line.
constexpr size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

// The state of one work item (nq = rows·group query vectors), carved from the calling
// participant's scratch buffer.
struct State {
  const float** q = nullptr;  // [nq] query vectors
  float* s = nullptr;         // [nq, kScoreStride] scores, then probabilities
  float* acc = nullptr;       // [nq, D] unnormalised outputs
  float* m = nullptr;         // [nq] running max
  float* l = nullptr;         // [nq] running sum
  float* alpha = nullptr;     // [nq] rescale of acc for the current block
  int64_t* last = nullptr;    // [nq] last key each query attends
  int64_t keys = 0;           // keys any query attends: [0, keys)
  // The key block after the current one (prefetched while it is scored): its keys and values
  // (element type of the cache) and its rows; null at the last block.
  const void* next_k = nullptr;
  const void* next_v = nullptr;
  int64_t next_rows = 0;
  void* extra = nullptr;  // the caller's extra_bytes (64-byte aligned)
};

// Keys of the block from t0: at most kKeyBlock, ending at T and at the end of t0's page.
inline int64_t BlockKeys(const AttentionTile& w, int64_t t0, int64_t T) {
  return KeyBlockLength(w, t0, T, kKeyBlock);
}

// Points st.next_* at the block after [t0, t0 + tb) (none past T).
inline void SetNextBlock(const AttentionTile& w, int64_t t0, int64_t tb, int64_t T, State& st) {
  const int64_t t1 = t0 + tb;
  st.next_rows = t1 < T ? BlockKeys(w, t1, T) : 0;
  if (st.next_rows == 0) {
    st.next_k = st.next_v = nullptr;
    return;
  }
  const AttentionTile n = BlockTile(w, t1);
  st.next_k = n.k_bf16 != nullptr ? static_cast<const void*>(n.k_bf16) : n.k;
  st.next_v = n.v_bf16 != nullptr ? static_cast<const void*>(n.v_bf16) : n.v;
}

// The state of `w` with acc = 0, m = -inf, l = 0, and extra_bytes more for the caller.
State Prepare(const AttentionTile& w, ScratchBuffer& scratch, size_t extra_bytes);

// Online-softmax update of query i for keys [t0, t0 + tb): turns st.s row i into weights
// p = exp(s - m_new) (0 past the query's last key) and sets st.alpha[i] = exp(m_old - m_new).
// With `pairs` (room for (tb + 1) / 2 values) the weights are also rounded to BF16 (nearest
// even) and stored two per uint32, key t0 + 2k in the low half of pairs[k], and st.l sums the
// rounded weights, the ones a BF16 product uses.
void SoftmaxRow(State& st, int64_t i, int64_t t0, int64_t tb, uint32_t* pairs);

// out = acc / l (0 for a query with no key) and lse, per kernels/attention.h. With `perm`,
// acc holds column perm[c] of each 32-column chunk at position c (REQUIRES: D % 32 == 0).
void Finish(const AttentionTile& w, const State& st, const uint8_t* perm);

}  // namespace vls::kernels::avx512_attention

#endif  // VLSTACK_KERNELS_ATTENTION_AVX512_INTERNAL_H_
