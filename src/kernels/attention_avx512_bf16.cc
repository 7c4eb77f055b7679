// The "avx512bf16" attention tile over a BF16 cache with K in key tiles (kernels/attention.h,
// model/kv_cache.h): the blocked online softmax of attention_avx512.cc with both products on
// vdpbf16ps (32 BF16 pairs per instruction into 16 f32 sums) instead of f32 FMAs on widened
// keys and values. Any other cache goes to the f32 tile (ADR 0022).
//
// - Scores: each query is rounded to BF16 once per work item (nearest even); q·k then sums
//   exact BF16 products in f32, 16 keys per vector from the key tiles. Against the f32 product of
//   the unrounded query, a score moves by at most 2⁻⁸·scale·Σ|q_d·k_d| (the query's rounding) plus
//   the f32 summation error.
// - Values: the softmax weights p of a key block are rounded to BF16 (nearest even) and the
//   running sum l adds the rounded weights, so out = Σ p̃_t·v_t / Σ p̃_t stays a convex
//   combination of the values: each weight's relative change is at most 2⁻⁸.
// vdpbf16ps takes its pairs along the reduction: two keys per instruction. The values of keys t
// and t + 1 are interleaved with vpunpck{l,h}wd, so each 32-column chunk of the accumulator
// holds its columns permuted (kPerm), put back in order once, in Finish.
//
// Compiled with the AVX-512 flags and -mavx512bf16; only called after the CPU check.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_avx512_internal.h"
#include "kernels/scratch.h"

namespace vls::kernels {

namespace {

using namespace avx512_attention;  // NOLINT(google-build-using-namespace)

// BF16 weight pairs per query row of a key block.
constexpr int64_t kPairStride = kKeyBlock / 2;

// Position k of a 32-column accumulator chunk holds column kPerm[k]: vpunpcklwd puts columns
// 8L + 0..3 of 128-bit lane L into f32 lanes 4L + 0..3 (positions 0..15), vpunpckhwd columns
// 8L + 4..7 (positions 16..31).
constexpr std::array<uint8_t, 32> kPerm = [] {
  std::array<uint8_t, 32> p{};
  for (size_t k = 0; k < 16; ++k) {
    p[k] = static_cast<uint8_t>(8 * (k / 4) + k % 4);
    p[16 + k] = static_cast<uint8_t>(8 * (k / 4) + 4 + k % 4);
  }
  return p;
}();

inline __m512bh AsBf16(__m512i x) { return (__m512bh)x; }
inline __m512i Load32(const uint16_t* p) { return _mm512_loadu_si512(p); }

// The BF16 queries and weight pairs of one work item, beside its State.
struct Bf16Parts {
  const uint16_t* q;  // [nq, D] queries rounded to BF16
  uint32_t* pairs;    // [nq, kPairStride] weights of the current key block, two per value
};

// s[i][t - t0] = scale · q_i · k_t for queries [i0, i0 + QR) and keys [t0, t0 + tb) of a key-tiled
// cache (AttentionTile::k_tiles), whose NV tiles from a0 = t0 rounded down to a tile cover them:
// per column pair, the query's pair broadcast against one vector of 16 keys per tile. Each
// score is the same sequential sum whatever lane or tile its key falls in.
template <int QR, int NV>
void ScoreTiles(const AttentionTile& w, State& st, const Bf16Parts& b, int64_t i0, int64_t t0,
                int64_t tb) {
  const int64_t D = w.head_dim, a0 = t0 - t0 % 16;
  __m512 acc[QR][NV];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const auto* q = reinterpret_cast<const uint32_t*>(b.q + i0 * D);  // column pairs
  // Tile a0 / 16 (in t0's page); tile v at + v·16·D, pair c at + 32c.
  const uint16_t* kt = w.k_bf16 + KeyOffset(w, a0);
  for (int64_t c = 0; c < D / 2; ++c) {
    __m512bh k[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) k[v] = AsBf16(Load32(kt + v * 16 * D + 32 * c));
#pragma GCC unroll 4
    for (int i = 0; i < QR; ++i) {
      const __m512bh qi = AsBf16(_mm512_set1_epi32(static_cast<int>(q[i * D / 2 + c])));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], qi, k[v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(w.scale);
  alignas(64) float out[16 * NV];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(out + 16 * v, _mm512_mul_ps(acc[i][v], scale));
    std::copy_n(out + (t0 - a0), tb, st.s + (i0 + i) * kScoreStride);
  }
}

template <int QR>
void ScoreTileRows(const AttentionTile& w, State& st, const Bf16Parts& b, int64_t i0, int64_t t0,
                   int64_t tb) {
  switch ((t0 % 16 + tb + 15) / 16) {
    case 1: return ScoreTiles<QR, 1>(w, st, b, i0, t0, tb);
    case 2: return ScoreTiles<QR, 2>(w, st, b, i0, t0, tb);
    case 3: return ScoreTiles<QR, 3>(w, st, b, i0, t0, tb);
    default: return ScoreTiles<QR, 4>(w, st, b, i0, t0, tb);
  }
}

// acc_i = alpha_i · acc_i + Σ_t p̃_i[t] · v_t for queries [i0, i0 + QR) and the NC 32-column
// chunks from d0, held in QR·2·NC registers (columns permuted as kPerm).
template <int QR, int NC>
void AccumulateChunk(const AttentionTile& w, State& st, const Bf16Parts& b, int64_t i0, int64_t t0,
                     int64_t tb, int64_t d0) {
  static_assert(QR * 2 * NC <= 16);
  const int64_t D = w.head_dim;
  __m512 a[QR][2 * NC];
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
    const __m512 al = _mm512_set1_ps(st.alpha[i0 + i]);
    const float* acc = st.acc + (i0 + i) * D + d0;
#pragma GCC unroll 8
    for (int c = 0; c < 2 * NC; ++c) a[i][c] = _mm512_mul_ps(al, _mm512_loadu_ps(acc + 16 * c));
  }
  const uint32_t* p = b.pairs + i0 * kPairStride;
  const uint16_t* v = w.v_bf16 + KeyOffset(w, t0) + d0;
  // One pair of keys per step; an odd last key pairs with zeros (its partner's weight is 0 and
  // key t0 + tb may be past the cache).
  for (int64_t t = 0; t < tb; t += 2, v += 2 * D) {
    const bool pair = t + 1 < tb;
    __m512i lo[NC], hi[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const __m512i x = Load32(v + 32 * c);
      const __m512i y = pair ? Load32(v + D + 32 * c) : _mm512_setzero_si512();
      lo[c] = _mm512_unpacklo_epi16(x, y);
      hi[c] = _mm512_unpackhi_epi16(x, y);
    }
#pragma GCC unroll 4
    for (int i = 0; i < QR; ++i) {
      const __m512bh pi = AsBf16(_mm512_set1_epi32(static_cast<int>(p[i * kPairStride + t / 2])));
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        a[i][2 * c] = _mm512_dpbf16_ps(a[i][2 * c], pi, AsBf16(lo[c]));
        a[i][2 * c + 1] = _mm512_dpbf16_ps(a[i][2 * c + 1], pi, AsBf16(hi[c]));
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QR; ++i) {
    float* acc = st.acc + (i0 + i) * D + d0;
#pragma GCC unroll 8
    for (int c = 0; c < 2 * NC; ++c) _mm512_storeu_ps(acc + 16 * c, a[i][c]);
  }
}

// AccumulateChunk over all of D: one pass over the V rows at D = 128 for up to 2 queries.
template <int QR>
void AccumulateRows(const AttentionTile& w, State& st, const Bf16Parts& b, int64_t i0, int64_t t0,
                    int64_t tb) {
  constexpr int NC = QR <= 2 ? 4 : 2;
  const int64_t D = w.head_dim;
  int64_t d0 = 0;
  for (; d0 + 32 * NC <= D; d0 += 32 * NC) AccumulateChunk<QR, NC>(w, st, b, i0, t0, tb, d0);
  for (; d0 < D; d0 += 32) AccumulateChunk<QR, 1>(w, st, b, i0, t0, tb, d0);
}

void AttendBlocks(const AttentionTile& w, State& st, const Bf16Parts& b) {
  const int64_t nq = w.rows * w.group, D = w.head_dim;
  const int64_t T = st.keys;
  // Blocks end at multiples of kKeyBlock (and at page ends, multiples of 16: pages hold whole
  // key tiles), so a block spans at most 4 key tiles. The boundaries still depend on nothing
  // but w.first and the pages.
  auto block_keys = [&](int64_t t0) {
    return KeyBlockLength(w, t0, T, kKeyBlock - t0 % kKeyBlock);
  };
  if (w.first < T) {
    const int64_t at = KeyOffset(w, w.first);
    PrefetchRows(w.k_bf16 + at, 0, kPrefetchKeys, block_keys(w.first), D);
    PrefetchRows(w.v_bf16 + at, 0, kPrefetchKeys, block_keys(w.first), D);
  }
  for (int64_t t0 = w.first, tb = 0; t0 < T; t0 += tb) {
    tb = block_keys(t0);
    if (t0 + tb < T) {
      const int64_t at = KeyOffset(w, t0 + tb);
      PrefetchRows(w.k_bf16 + at, 0, kKeyBlock, block_keys(t0 + tb), D);
      PrefetchRows(w.v_bf16 + at, 0, kKeyBlock, block_keys(t0 + tb), D);
    }
    ForQueryTiles(nq, [&](int64_t i, auto rows) {
      ScoreTileRows<decltype(rows)::kRows>(w, st, b, i, t0, tb);
    });
    for (int64_t i = 0; i < nq; ++i) SoftmaxRow(st, i, t0, tb, b.pairs + i * kPairStride);
    ForQueryTiles(nq, [&](int64_t i, auto rows) {
      AccumulateRows<decltype(rows)::kRows>(w, st, b, i, t0, tb);
    });
  }
}

}  // namespace

namespace avx512_internal {

void AttentionBf16(const AttentionTile& w, ScratchBuffer& scratch) {
  const int64_t D = w.head_dim;
  if (w.k_bf16 == nullptr || !w.k_tiles) {  // key tiles imply D % 32 == 0 (KvCache)
    Attention(w, scratch);
    return;
  }
  const auto nq = static_cast<size_t>(w.rows * w.group);
  const size_t q_bytes = Aligned(nq * static_cast<size_t>(D) * sizeof(uint16_t));
  State st = Prepare(w, scratch, q_bytes + Aligned(nq * kPairStride * sizeof(uint32_t)));
  auto* qb = static_cast<uint16_t*>(st.extra);
  for (size_t i = 0; i < nq; ++i) {
    for (int64_t d = 0; d < D; d += 32) {
      const __m512bh h =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(st.q[i] + d + 16), _mm512_loadu_ps(st.q[i] + d));
      _mm512_storeu_si512(qb + static_cast<int64_t>(i) * D + d, (__m512i)h);
    }
  }
  const Bf16Parts b{qb, reinterpret_cast<uint32_t*>(static_cast<std::byte*>(st.extra) + q_bytes)};
  AttendBlocks(w, st, b);
  Finish(w, st, kPerm.data());
}

}  // namespace avx512_internal

}  // namespace vls::kernels
