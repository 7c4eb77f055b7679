// AVX2 attention: the blocked online-softmax tile (kernels/attention.h) and the reference path's
// scores and weighted sum (KernelVariant::attention, scores, weighted_sum). The design is the
// AVX-512 one (attention_avx512.cc) on 8 lanes: online softmax over blocks of kKeyBlock keys for
// every query head of one GQA group and a block of query rows, so each K/V row is read from
// memory once per work item and stays in L1/L2 while all of its queries use it. With 16 vector
// registers, register tiles hold at most 8 accumulators. Compiled with the AVX2 flags; only
// called after the CPU check in dispatch.cc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/avx2_internal.h"
#include "kernels/avx2_math.h"
#include "kernels/scratch.h"

namespace vls::kernels::avx2_internal {

namespace {

constexpr int64_t kKeyBlock = 64;
// Keys and values are prefetched this far ahead of the key block being scored.
constexpr int64_t kPrefetchKeys = kKeyBlock;
// Score rows have room for a whole last key tile (up to 8 keys) past kKeyBlock.
constexpr int64_t kScoreStride = kKeyBlock + 8;

// 8 keys or values as f32: loaded from an f32 cache, or widened exactly from a BF16 one.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}
// The first `left` of 8 values (none for left <= 0), zeros after them; reads nothing past them.
inline __m256 LoadPart(const float* p, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, TailMask8(left));
}
// Out of line: inlined, GCC zeroes every call site's buffer on entry to the caller, also on the
// whole-vector path (a rep stos per score tile).
[[gnu::noinline]] __m256 LoadTail(const uint16_t* p, int64_t left) {
  alignas(16) uint16_t part[8] = {};  // AVX2 has no masked 16-bit load
  for (int64_t i = 0; i < left; ++i) part[i] = p[i];
  return Load8(part);
}
inline __m256 LoadPart(const uint16_t* p, int64_t left) {
  return left >= 8 ? Load8(p) : LoadTail(p, left);
}
inline void StorePart(float* p, int64_t left, __m256 x) {
  if (left >= 8) {
    _mm256_storeu_ps(p, x);
  } else if (left > 0) {
    _mm256_maskstore_ps(p, TailMask8(left), x);
  }
}

// Lane i of the result = horizontal sum of a[i], for 8 vectors (two levels of hadd within the
// 128-bit lanes, then one add across them).
inline __m256 Reduce8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  // Per 128-bit lane: element e = that lane's partial sum of a[e] (u0) and a[4 + e] (u1).
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

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
  // and its rows; null at the last block.
  const void* next_k = nullptr;
  const void* next_v = nullptr;
  int64_t next_rows = 0;
};

inline int64_t BlockKeys(const AttentionTile& w, int64_t t0, int64_t T) {
  return KeyBlockLength(w, t0, T, kKeyBlock);
}

// Keys per score tile of QR queries: QR·KR <= 8 accumulators, plus QR query vectors and one
// key vector, fit the 16 registers.
constexpr int KeysPerTile(int QR) { return QR == 3 ? 2 : 8 / QR; }

// acc[i·KR + j] += q_i[d, d + 8) · k_j[d, d + 8) lane by lane; kFull: all 8 exist, otherwise
// the first D - d.
template <int QR, int KR, bool kFull, typename KV>
inline void ScoreStep(const float* const* q, const KV* const* k, int64_t d, int64_t D,
                      __m256* acc) {
  __m256 qv[QR];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i)
    qv[i] = kFull ? _mm256_loadu_ps(q[i] + d) : LoadPart(q[i] + d, D - d);
#pragma GCC unroll 8
  for (int j = 0; j < KR; ++j) {
    const __m256 kv = kFull ? Load8(k[j] + d) : LoadPart(k[j] + d, D - d);
#pragma GCC unroll 4
    for (int i = 0; i < QR; ++i) acc[i * KR + j] = _mm256_fmadd_ps(qv[i], kv, acc[i * KR + j]);
  }
}

// s[i][j] = scale · q_i · k_j for QR queries × KR keys over D (s rows kScoreStride apart).
template <int QR, int KR, typename KV>
void ScoreTile(const float* const* q, const KV* const* k, int64_t D, float scale, float* s) {
  static_assert(QR * KR <= 8);
  __m256 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) ScoreStep<QR, KR, true>(q, k, d, D, acc);
  if (d < D) ScoreStep<QR, KR, false>(q, k, d, D, acc);
  alignas(32) float out[8];
  _mm256_store_ps(out, _mm256_mul_ps(Reduce8(acc), _mm256_set1_ps(scale)));
  for (int i = 0; i < QR; ++i) std::memcpy(s + i * kScoreStride, out + i * KR, KR * sizeof(float));
}

// Prefetches keys [t, t + n) of a [T, D] head (clipped to T) into L1: the rows of one head are
// contiguous, but a hardware prefetcher restarts at every 4 KiB page (8 f32 keys at D = 128).
template <typename KV>
void PrefetchRows(const KV* base, int64_t t, int64_t n, int64_t T, int64_t D) {
  constexpr int64_t kLine = 64 / sizeof(KV);  // elements per cache line
  const int64_t end = std::min(T, t + n) * D;
  for (int64_t i = t * D; i < end; i += kLine) {
    _mm_prefetch(reinterpret_cast<const char*>(base + i), _MM_HINT_T0);
  }
}

// The keys and values of a tile as one element type.
template <typename KV>
struct KvPtrs {
  const KV* k;
  const KV* v;
};
inline KvPtrs<float> Kv(const AttentionTile& w, float /*tag*/) { return {w.k, w.v}; }
inline KvPtrs<uint16_t> Kv(const AttentionTile& w, uint16_t /*tag*/) {
  return {w.k_bf16, w.v_bf16};
}

// Scores of queries [i0, i0 + QR) against keys [t0, t0 + tb) into st.s (row i, column t - t0);
// `w` is the block's tile (BlockTile: key t0 + j at + j·D), so t0 is 0 here. The first query
// tile of a block also prefetches the next block's keys and values, a tile's worth at a time.
template <typename KV, int QR>
void ScoreRows(const AttentionTile& w, State& st, int64_t i0, int64_t t0, int64_t tb) {
  constexpr int KR = KeysPerTile(QR);
  const int64_t D = w.head_dim;
  const KvPtrs<KV> kv = Kv(w, KV{});
  for (int64_t j0 = 0; j0 < tb; j0 += KR) {
    if (i0 == 0 && st.next_k != nullptr) {
      PrefetchRows(static_cast<const KV*>(st.next_k), j0, KR, st.next_rows, D);
      PrefetchRows(static_cast<const KV*>(st.next_v), j0, KR, st.next_rows, D);
    }
    // Past the block's last key, the tile scores that key again (columns never read).
    const KV* k[KR];
    for (int j = 0; j < KR; ++j) k[j] = kv.k + (t0 + std::min<int64_t>(j0 + j, tb - 1)) * D;
    ScoreTile<QR, KR>(st.q + i0, k, D, w.scale, st.s + i0 * kScoreStride + j0);
  }
}

// Online-softmax update of query i for keys [t0, t0 + tb): turns st.s row i into weights.
// Lanes past the query's last key are masked (they may hold anything, NaN included).
void SoftmaxRow(State& st, int64_t i, int64_t t0, int64_t tb) {
  float* s = st.s + i * kScoreStride;
  const int64_t valid = std::clamp<int64_t>(st.last[i] + 1 - t0, 0, tb);
  if (valid == 0) {  // the whole block is after this query's last key
    std::fill_n(s, tb, 0.0f);
    st.alpha[i] = 1.0f;
    return;
  }
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 mx = ninf;
  for (int64_t t = 0; t < valid; t += 8) {
    const __m256 keep = _mm256_castsi256_ps(TailMask8(valid - t));
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + t), keep));
  }
  float& m = st.m[i];
  const float m_new = std::max(m, ReduceMax(mx));
  const float alpha = std::exp(m - m_new);  // 0 for the first block (m = -inf)
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t t = 0; t < tb; t += 8) {
    const __m256 keep = _mm256_castsi256_ps(TailMask8(valid - t));
    const __m256 p = _mm256_and_ps(keep, Exp(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv)));
    sum = _mm256_add_ps(sum, p);
    _mm256_storeu_ps(s + t, p);
  }
  st.l[i] = st.l[i] * alpha + ReduceAdd(sum);
  m = m_new;
  st.alpha[i] = alpha;
}

// acc_i = alpha_i · acc_i + Σ_t p_i[t] · v_t for queries [i0, i0 + QR) and D columns
// [d0, d0 + 8·NV) held in QR·NV registers. kFull: all 8·NV columns exist (no partial loads).
template <typename KV, int QR, int NV, bool kFull>
void AccumulateChunk(const AttentionTile& w, State& st, int64_t i0, int64_t t0, int64_t tb,
                     int64_t d0) {
  const int64_t D = w.head_dim;
  __m256 a[QR][NV];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
    const __m256 al = _mm256_set1_ps(st.alpha[i0 + i]);
    const float* acc = st.acc + (i0 + i) * D + d0;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      a[i][c] = _mm256_mul_ps(
          al, kFull ? _mm256_loadu_ps(acc + 8 * c) : LoadPart(acc + 8 * c, D - d0 - 8 * c));
    }
  }
  const float* p = st.s + i0 * kScoreStride;
  const KV* v = Kv(w, KV{}).v + t0 * D + d0;
  for (int64_t t = 0; t < tb; ++t, v += D) {
    __m256 pi[QR];
#pragma GCC unroll 4
    for (int i = 0; i < QR; ++i) pi[i] = _mm256_set1_ps(p[i * kScoreStride + t]);
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      const __m256 vv = kFull ? Load8(v + 8 * c) : LoadPart(v + 8 * c, D - d0 - 8 * c);
#pragma GCC unroll 4
      for (int i = 0; i < QR; ++i) a[i][c] = _mm256_fmadd_ps(pi[i], vv, a[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
    float* acc = st.acc + (i0 + i) * D + d0;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) StorePart(acc + 8 * c, kFull ? 8 : D - d0 - 8 * c, a[i][c]);
  }
}

// AccumulateChunk over all of D: QR·NV <= 8 accumulators, plus QR weights and one value vector.
template <typename KV, int QR>
void AccumulateRows(const AttentionTile& w, State& st, int64_t i0, int64_t t0, int64_t tb) {
  constexpr int NV = QR == 1 ? 8 : QR == 2 ? 4 : 2;
  const int64_t D = w.head_dim;
  int64_t d0 = 0;
  for (; d0 + 8 * NV <= D; d0 += 8 * NV) {
    AccumulateChunk<KV, QR, NV, true>(w, st, i0, t0, tb, d0);
  }
  if (d0 < D) AccumulateChunk<KV, QR, NV, false>(w, st, i0, t0, tb, d0);
}

// Runs Fn<KV, QR> over queries [0, nq) in tiles of 4, then a tile of the remainder.
template <typename KV, template <typename, int> class Fn>
void ForQueryTiles(int64_t nq, const Fn<KV, 1>& f1, const Fn<KV, 2>& f2, const Fn<KV, 3>& f3,
                   const Fn<KV, 4>& f4) {
  int64_t i = 0;
  for (; i + 4 <= nq; i += 4) f4(i);
  switch (nq - i) {
    case 1: f1(i); break;
    case 2: f2(i); break;
    case 3: f3(i); break;
    default: break;
  }
}

template <typename KV, int QR>
struct ScoreFn {
  const AttentionTile& w;
  State& st;
  int64_t t0, tb;
  void operator()(int64_t i) const { ScoreRows<KV, QR>(w, st, i, t0, tb); }
};
template <typename KV, int QR>
struct AccumulateFn {
  const AttentionTile& w;
  State& st;
  int64_t t0, tb;
  void operator()(int64_t i) const { AccumulateRows<KV, QR>(w, st, i, t0, tb); }
};

// 64-byte-aligned sizes, so every array of the state starts on a cache line.
constexpr size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

State Prepare(const AttentionTile& w, ScratchBuffer& scratch) {
  const auto nq = static_cast<size_t>(w.rows * w.group);
  const auto D = static_cast<size_t>(w.head_dim);
  const size_t q_bytes = Aligned(nq * sizeof(const float*));
  const size_t s_bytes = Aligned(nq * kScoreStride * sizeof(float));
  const size_t acc_bytes = Aligned(nq * D * sizeof(float));
  const size_t vec_bytes = Aligned(nq * sizeof(float));
  const size_t last_bytes = Aligned(nq * sizeof(int64_t));
  auto* p = static_cast<std::byte*>(
      scratch.Reserve(q_bytes + s_bytes + acc_bytes + 3 * vec_bytes + last_bytes));
  State st;
  st.q = reinterpret_cast<const float**>(p);
  st.s = reinterpret_cast<float*>(p += q_bytes);
  st.acc = reinterpret_cast<float*>(p += s_bytes);
  st.m = reinterpret_cast<float*>(p += acc_bytes);
  st.l = reinterpret_cast<float*>(p += vec_bytes);
  st.alpha = reinterpret_cast<float*>(p += vec_bytes);
  st.last = reinterpret_cast<int64_t*>(p += vec_bytes);
  std::fill_n(st.acc, nq * D, 0.0f);
  std::fill_n(st.m, nq, -std::numeric_limits<float>::infinity());
  std::fill_n(st.l, nq, 0.0f);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t j = 0; j < w.group; ++j) {
      const auto i = static_cast<size_t>(r * w.group + j);
      st.q[i] = w.q + r * w.q_row_stride + j * w.head_dim;
      st.last[i] = w.last[r];
    }
  }
  st.keys = *std::max_element(st.last, st.last + nq) + 1;
  return st;
}

template <typename KV>
void AttendBlocks(const AttentionTile& w, State& st) {
  const int64_t nq = w.rows * w.group, D = w.head_dim;
  const int64_t T = st.keys;
  if (w.first < T) {
    const KvPtrs<KV> kv = Kv(BlockTile(w, w.first), KV{});
    PrefetchRows(kv.k, 0, kPrefetchKeys, BlockKeys(w, w.first, T), D);
    PrefetchRows(kv.v, 0, kPrefetchKeys, BlockKeys(w, w.first, T), D);
  }
  // Blocks of kKeyBlock keys from w.first, cut at page ends (none when w.first and the pages
  // are multiples of kKeyBlock), each scored through its own tile.
  for (int64_t t0 = w.first, tb = 0; t0 < T; t0 += tb) {
    tb = BlockKeys(w, t0, T);
    const int64_t t1 = t0 + tb;
    st.next_rows = t1 < T ? BlockKeys(w, t1, T) : 0;
    st.next_k = st.next_rows > 0 ? Kv(BlockTile(w, t1), KV{}).k : nullptr;
    st.next_v = st.next_rows > 0 ? Kv(BlockTile(w, t1), KV{}).v : nullptr;
    const AttentionTile b = BlockTile(w, t0);
    ForQueryTiles<KV, ScoreFn>(nq, {b, st, 0, tb}, {b, st, 0, tb}, {b, st, 0, tb}, {b, st, 0, tb});
    for (int64_t i = 0; i < nq; ++i) SoftmaxRow(st, i, t0, tb);
    ForQueryTiles<KV, AccumulateFn>(nq, {b, st, 0, tb}, {b, st, 0, tb}, {b, st, 0, tb},
                                    {b, st, 0, tb});
  }
}

void Attention(const AttentionTile& w, ScratchBuffer& scratch) {
  State st = Prepare(w, scratch);
  const int64_t D = w.head_dim;
  if (w.k_bf16 != nullptr) {
    AttendBlocks<uint16_t>(w, st);
  } else {
    AttendBlocks<float>(w, st);
  }
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t j = 0; j < w.group; ++j) {
      const int64_t i = r * w.group + j;
      const bool none = st.l[i] == 0.0f;  // no key of the tile (first > last[r])
      const float inv = none ? 0.0f : 1.0f / st.l[i];
      const float* acc = st.acc + i * D;
      float* out = w.out + r * w.out_row_stride + j * D;
      for (int64_t d = 0; d < D; ++d) out[d] = acc[d] * inv;
      if (w.lse != nullptr) {
        w.lse[i] = none ? -std::numeric_limits<float>::infinity() : st.m[i] + std::log(st.l[i]);
      }
    }
  }
}

// The reference path's entries (KernelVariant::scores, weighted_sum), also the vision
// encoder's attention.

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i < n; i += 8)
    acc0 = _mm256_fmadd_ps(LoadPart(a + i, n - i), LoadPart(b + i, n - i), acc0);
  return ReduceAdd(_mm256_add_ps(acc0, acc1));
}

void Scores(const float* q, const float* k, int64_t stride, int64_t T, int64_t D, float scale,
            float* out) {
  for (int64_t t = 0; t < T; ++t) out[t] = Dot(q, k + t * stride, D) * scale;
}

// out[d0, d0 + 8·NV) = Σ_t p[t] · v_t over those columns, NV vectors in registers across all T
// rows; kFull: all 8·NV columns exist.
template <int NV, bool kFull>
void WeightedSumChunk(const float* p, const float* v, int64_t stride, int64_t T, int64_t D,
                      int64_t d0, float* out) {
  __m256 acc[NV];
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t t = 0; t < T; ++t) {
    const __m256 pt = _mm256_set1_ps(p[t]);
    const float* vt = v + t * stride + d0;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      const __m256 x = kFull ? _mm256_loadu_ps(vt + 8 * c) : LoadPart(vt + 8 * c, D - d0 - 8 * c);
      acc[c] = _mm256_fmadd_ps(pt, x, acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) StorePart(out + d0 + 8 * c, kFull ? 8 : D - d0 - 8 * c, acc[c]);
}

// Keeps up to 64 output values in registers across all T rows instead of a load/store of `out`
// per row; a remainder of D in narrower chunks (D = 80: 64 + 16), the last one partial (1 to 15
// columns).
void WeightedSum(const float* p, const float* v, int64_t stride, int64_t T, int64_t D, float* out) {
  int64_t d0 = 0;
  for (; d0 + 64 <= D; d0 += 64) WeightedSumChunk<8, true>(p, v, stride, T, D, d0, out);
  if (d0 + 32 <= D) {
    WeightedSumChunk<4, true>(p, v, stride, T, D, d0, out);
    d0 += 32;
  }
  if (d0 + 16 <= D) {
    WeightedSumChunk<2, true>(p, v, stride, T, D, d0, out);
    d0 += 16;
  }
  if (d0 < D) WeightedSumChunk<2, false>(p, v, stride, T, D, d0, out);
}

}  // namespace

void AddAttentionKernels(KernelVariant* v) {
  v->attention = Attention;
  v->scores = Scores;
  v->weighted_sum = WeightedSum;
}

}  // namespace vls::kernels::avx2_internal
