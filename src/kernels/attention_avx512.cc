// AVX-512 attention (kernels/attention.h): online softmax over blocks of kKeyBlock keys for
// every query head of one GQA group and a block of query rows, so each K/V row is read once per
// work item and stays in L1/L2 while all of the work item's queries use it. Compiled with
// AVX-512 flags (see CMakeLists.txt); only called after the CPU check in dispatch.cc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/attention_avx512_internal.h"
#include "kernels/avx512_math.h"
#include "kernels/scratch.h"

namespace vls::kernels {

namespace {

using namespace avx512_attention;  // NOLINT(google-build-using-namespace)

// Lane i of the result = horizontal sum of a[i], for 16 vectors (a transpose-and-add tree:
// 45 shuffles/adds for 16 sums instead of 16 separate reductions).
inline __m512 Reduce16(const __m512* a) {
  __m512 u[4];
  for (int g = 0; g < 4; ++g) {
    const __m512* b = a + 4 * g;
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(b[0], b[1]), _mm512_unpackhi_ps(b[0], b[1]));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(b[2], b[3]), _mm512_unpackhi_ps(b[2], b[3]));
    const __m512d d0 = _mm512_castps_pd(t0), d1 = _mm512_castps_pd(t1);
    // Per 128-bit lane: element e = that lane's partial sum of b[e].
    u[g] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d0, d1)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(d0, d1)));
  }
  const __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 16 keys or values as f32: loaded from an f32 cache, or widened exactly from a BF16 one.
inline __m512 Load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
inline __m512 Load16(const uint16_t* p, __mmask16 mask) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}
inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

// s[i][j] = scale · q_i · k_j for QR queries × KR keys (QR·KR <= 16) over D.
template <int QR, int KR, typename KV>
inline void ScoreStep(const float* const* q, const KV* const* k, int64_t d, __mmask16 mask,
                      __m512* acc) {
  __m512 qv[QR];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) qv[i] = _mm512_maskz_loadu_ps(mask, q[i] + d);
#pragma GCC unroll 16
  for (int j = 0; j < KR; ++j) {
    const __m512 kv = Load16(k[j] + d, mask);
#pragma GCC unroll 4
    for (int i = 0; i < QR; ++i) acc[i * KR + j] = _mm512_fmadd_ps(qv[i], kv, acc[i * KR + j]);
  }
}

// s[i][j] = scale · q_i · k_j for QR queries × KR keys (QR·KR <= 16) over D.
template <int QR, int KR, typename KV>
void ScoreTile(const float* const* q, const KV* const* k, int64_t D, float scale, float* s) {
  static_assert(QR * KR <= 16);
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) ScoreStep<QR, KR>(q, k, d, 0xffff, acc);
  if (d < D) ScoreStep<QR, KR>(q, k, d, TailMask(D - d), acc);
  alignas(64) float out[16];
  _mm512_store_ps(out, _mm512_mul_ps(Reduce16(acc), _mm512_set1_ps(scale)));
  for (int i = 0; i < QR; ++i) std::memcpy(s + i * kScoreStride, out + i * KR, KR * sizeof(float));
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
  constexpr int KR = 16 / QR;
  const int64_t D = w.head_dim;
  const KvPtrs<KV> kv = Kv(w, KV{});
  for (int64_t j0 = 0; j0 < tb; j0 += KR) {
    if (i0 == 0 && st.next_k != nullptr) {
      PrefetchRows(static_cast<const KV*>(st.next_k), j0, KR, st.next_rows, D);
      PrefetchRows(static_cast<const KV*>(st.next_v), j0, KR, st.next_rows, D);
    }
    const KV* k[KR];
    for (int j = 0; j < KR; ++j) k[j] = kv.k + (t0 + std::min<int64_t>(j0 + j, tb - 1)) * D;
    ScoreTile<QR, KR>(st.q + i0, k, D, w.scale, st.s + i0 * kScoreStride + j0);
  }
}

inline __m512 LoadPart(const float* p, int64_t left) {
  return left >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(TailMask(left), p);
}
template <typename KV>
inline __m512 LoadPartKv(const KV* p, int64_t left) {
  return left >= 16 ? Load16(p) : Load16(p, TailMask(left));
}
inline void StorePart(float* p, int64_t left, __m512 x) {
  if (left >= 16) {
    _mm512_storeu_ps(p, x);
  } else if (left > 0) {
    _mm512_mask_storeu_ps(p, TailMask(left), x);
  }
}

// acc_i = alpha_i · acc_i + Σ_t p_i[t] · v_t for queries [i0, i0 + QR) and D columns
// [d0, d0 + 16·NV) held in QR·NV registers. kFull: all 16·NV columns exist (no masks).
template <typename KV, int QR, int NV, bool kFull>
void AccumulateChunk(const AttentionTile& w, State& st, int64_t i0, int64_t t0, int64_t tb,
                     int64_t d0) {
  const int64_t D = w.head_dim;
  __m512 a[QR][NV];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
    const __m512 al = _mm512_set1_ps(st.alpha[i0 + i]);
    const float* acc = st.acc + (i0 + i) * D + d0;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      a[i][c] = _mm512_mul_ps(
          al, kFull ? _mm512_loadu_ps(acc + 16 * c) : LoadPart(acc + 16 * c, D - d0 - 16 * c));
    }
  }
  const float* p = st.s + i0 * kScoreStride;
  const KV* v = Kv(w, KV{}).v + t0 * D + d0;
  for (int64_t t = 0; t < tb; ++t, v += D) {
    __m512 vv[NV];
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      vv[c] = kFull ? Load16(v + 16 * c) : LoadPartKv(v + 16 * c, D - d0 - 16 * c);
    }
#pragma GCC unroll 4
    for (int i = 0; i < QR; ++i) {
      const __m512 pi = _mm512_set1_ps(p[i * kScoreStride + t]);
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) a[i][c] = _mm512_fmadd_ps(pi, vv[c], a[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
    float* acc = st.acc + (i0 + i) * D + d0;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) StorePart(acc + 16 * c, kFull ? 16 : D - d0 - 16 * c, a[i][c]);
  }
}

// AccumulateChunk over all of D: one pass over the V rows at D = 128 for up to 2 queries.
template <typename KV, int QR>
void AccumulateRows(const AttentionTile& w, State& st, int64_t i0, int64_t t0, int64_t tb) {
  constexpr int NV = QR <= 2 ? 8 : 4;
  const int64_t D = w.head_dim;
  int64_t d0 = 0;
  for (; d0 + 16 * NV <= D; d0 += 16 * NV) {
    AccumulateChunk<KV, QR, NV, true>(w, st, i0, t0, tb, d0);
  }
  if (d0 < D) AccumulateChunk<KV, QR, NV, false>(w, st, i0, t0, tb, d0);
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
    SetNextBlock(w, t0, tb, T, st);
    const AttentionTile b = BlockTile(w, t0);
    ForQueryTiles(
        nq, [&](int64_t i, auto rows) { ScoreRows<KV, decltype(rows)::kRows>(b, st, i, 0, tb); });
    for (int64_t i = 0; i < nq; ++i) SoftmaxRow(st, i, t0, tb, nullptr);
    ForQueryTiles(nq, [&](int64_t i, auto rows) {
      AccumulateRows<KV, decltype(rows)::kRows>(b, st, i, 0, tb);
    });
  }
}

}  // namespace

namespace avx512_internal {

void Attention(const AttentionTile& w, ScratchBuffer& scratch) {
  State st = Prepare(w, scratch, 0);
  if (w.k_bf16 != nullptr) {
    AttendBlocks<uint16_t>(w, st);
  } else {
    AttendBlocks<float>(w, st);
  }
  Finish(w, st, nullptr);
}

}  // namespace avx512_internal

namespace avx512_attention {

State Prepare(const AttentionTile& w, ScratchBuffer& scratch, size_t extra_bytes) {
  const auto nq = static_cast<size_t>(w.rows * w.group);
  const auto D = static_cast<size_t>(w.head_dim);
  const size_t q_bytes = Aligned(nq * sizeof(const float*));
  const size_t s_bytes = Aligned(nq * kScoreStride * sizeof(float));
  const size_t acc_bytes = Aligned(nq * D * sizeof(float));
  const size_t vec_bytes = Aligned(nq * sizeof(float));
  const size_t last_bytes = Aligned(nq * sizeof(int64_t));
  auto* p = static_cast<std::byte*>(
      scratch.Reserve(q_bytes + s_bytes + acc_bytes + 3 * vec_bytes + last_bytes + extra_bytes));
  State st;
  st.q = reinterpret_cast<const float**>(p);
  st.s = reinterpret_cast<float*>(p += q_bytes);
  st.acc = reinterpret_cast<float*>(p += s_bytes);
  st.m = reinterpret_cast<float*>(p += acc_bytes);
  st.l = reinterpret_cast<float*>(p += vec_bytes);
  st.alpha = reinterpret_cast<float*>(p += vec_bytes);
  st.last = reinterpret_cast<int64_t*>(p += vec_bytes);
  st.extra = p + last_bytes;
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

void SoftmaxRow(State& st, int64_t i, int64_t t0, int64_t tb, uint32_t* pairs) {
  float* s = st.s + i * kScoreStride;
  const int64_t valid = std::clamp<int64_t>(st.last[i] + 1 - t0, 0, tb);
  if (valid == 0) {  // the whole block is after this query's last key
    std::fill_n(s, tb, 0.0f);
    if (pairs != nullptr) std::fill_n(pairs, (tb + 1) / 2, 0u);
    st.alpha[i] = 1.0f;
    return;
  }
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < valid; t += 16) {
    mx = _mm512_mask_max_ps(mx, TailMask(valid - t), mx, _mm512_loadu_ps(s + t));
  }
  float& m = st.m[i];
  const float m_new = std::max(m, _mm512_reduce_max_ps(mx));
  const float alpha = std::exp(m - m_new);  // 0 for the first block (m = -inf)
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t = 0; t < tb; t += 16) {
    const __mmask16 mask = TailMask(valid - t);
    __m512 p =
        _mm512_maskz_mov_ps(mask, avx512_internal::Exp(_mm512_sub_ps(_mm512_loadu_ps(s + t), mv)));
    if (pairs != nullptr) {
      // Nearest-even BF16 of p (finite, >= 0): (bits + 0x7fff + bit 16) >> 16.
      const __m512i b = _mm512_castps_si512(p);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
      const __m512i h = _mm512_srli_epi32(
          _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
      p = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
      // Two per uint32: as 64-bit lanes h[2k] | h[2k + 1] << 32, so the low half of
      // x | x >> 16 is h[2k] | h[2k + 1] << 16 (a tail of tb - t < 16 keys writes
      // ceil((tb - t) / 2) pairs).
      const __m256i packed = _mm512_cvtepi64_epi32(_mm512_or_si512(h, _mm512_srli_epi64(h, 16)));
      const int64_t n = std::min<int64_t>(8, (tb - t + 1) / 2);
      _mm256_mask_storeu_epi32(pairs + t / 2, static_cast<__mmask8>((1u << n) - 1u), packed);
    }
    sum = _mm512_add_ps(sum, p);
    _mm512_storeu_ps(s + t, p);
  }
  st.l[i] = st.l[i] * alpha + _mm512_reduce_add_ps(sum);
  m = m_new;
  st.alpha[i] = alpha;
}

void Finish(const AttentionTile& w, const State& st, const uint8_t* perm) {
  const int64_t D = w.head_dim;
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t j = 0; j < w.group; ++j) {
      const int64_t i = r * w.group + j;
      const bool none = st.l[i] == 0.0f;  // no key of the tile (first > last[r])
      const float inv = none ? 0.0f : 1.0f / st.l[i];
      const float* acc = st.acc + i * D;
      float* out = w.out + r * w.out_row_stride + j * D;
      if (perm == nullptr) {
        for (int64_t d = 0; d < D; ++d) out[d] = acc[d] * inv;
      } else {
        for (int64_t d = 0; d < D; ++d) out[d - d % 32 + perm[d % 32]] = acc[d] * inv;
      }
      if (w.lse != nullptr) {
        w.lse[i] = none ? -std::numeric_limits<float>::infinity() : st.m[i] + std::log(st.l[i]);
      }
    }
  }
}

}  // namespace avx512_attention

}  // namespace vls::kernels
