// The matmul on BF16 blocked weights (kernels/bf16_blocked.h) of the "avx512bf16" variant and,
// without AVX512-BF16 instructions, of "avx512" and "avx512vnni": the broadcast form. For each
// column pair t, the 64 weight rows of an n-block lie in four contiguous vectors of 16 rows × 2
// columns; each activation row's pair is broadcast and vdpbf16ps accumulates 16 outputs per vector.
// No horizontal sums, each weight vector feeds every activation row of the tile, and the weights
// stream sequentially.
//
// Every output is one f32 chain over the pairs in order, whatever the tile shape, so a row's
// result does not depend on M (batched decode equals single-row decode bit for bit).
// Compiled with -mavx512bf16; each entry is only called after its CPU check.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/bf16_blocked.h"
#include "kernels/matmul_tiles.h"

namespace vls::kernels::avx512_internal {

namespace {

constexpr int64_t kVec = 16;                      // outputs per vector
constexpr int64_t kPairStride = 2 * kBf16BlockN;  // values per column pair of an n-block
constexpr int64_t kChunkPairs = 64;               // pairs per chunk when M > 4 (16 KB)

inline __m512i BroadcastPair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// acc += x·w over each lane's pair of BF16 values (x even, x odd) · (w even, w odd): one
// vdpbf16ps with AVX512-BF16 (kNative), else two f32 FMAs on the widened halves (a BF16 value
// is the top half of its f32, so each product is exact in f32 either way).
template <bool kNative>
inline __m512 DotPairs(__m512 acc, __m512i x, __m512i w) {
  if constexpr (kNative) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(w));
  } else {
    const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                          _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x, hi)),
                           _mm512_castsi512_ps(_mm512_and_si512(w, hi)), acc);
  }
}

struct BlockedArgs {
  const uint16_t* xb;  // [M, K] BF16
  int64_t K;
  int64_t N;
  float* y;  // [M, N]
};

// Pairs [t0, t1) of y[m : m + MR, n : n + NV·16] (clipped to N) from the n-block's vectors
// starting at wv0: MR activation rows × NV vectors of accumulators, taken from and returned to
// acc_io ([MR][NV][16] f32) between chunks. The last chunk (t1 = all pairs) adds the odd column
// and stores y. kPrefetch: also prefetch the weights kChunkPairs pairs ahead into L1.
template <bool kNative, int MR, int NV, bool kPrefetch>
void TilePairs(const BlockedArgs& a, const uint16_t* wv0, int64_t m, int64_t n, int64_t t0,
               int64_t t1, float* acc_io) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_load_ps(acc_io + (i * NV + j) * kVec);
  }
  const int64_t K = a.K, pairs = K / 2;
  const uint16_t* xm = a.xb + m * K;
  for (int64_t t = t0, te = std::min(t1, pairs); t < te; ++t) {
    const uint16_t* wt = wv0 + t * kPairStride;
    if constexpr (kPrefetch) {
      const char* ahead = reinterpret_cast<const char*>(wt + kChunkPairs * kPairStride);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm_prefetch(ahead + j * 64, _MM_HINT_T0);
    }
    __m512i wv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) wv[j] = _mm512_loadu_si512(wt + j * 2 * kVec);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = BroadcastPair(xm + i * K + 2 * t);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = DotPairs<kNative>(acc[i][j], xv, wv[j]);
    }
  }
  if (t1 < (K + 1) / 2) {  // not the last chunk: park the sums for the next one
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm512_store_ps(acc_io + (i * NV + j) * kVec, acc[i][j]);
    }
    return;
  }
  if (K % 2 != 0) {
    // The last pair has one column; its partner is padding (0 in the weights), and the
    // activation's partner lane is set to 0 rather than read past the row.
    const uint16_t* wt = wv0 + pairs * kPairStride;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_set1_epi32(static_cast<int32_t>(xm[i * K + K - 1]));
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        acc[i][j] = DotPairs<kNative>(acc[i][j], xv, _mm512_loadu_si512(wt + j * 2 * kVec));
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) {
    const int64_t left = a.N - (n + j * kVec);
    if (left <= 0) break;
    const auto mask =
        static_cast<__mmask16>(left >= kVec ? 0xFFFFu : (1u << static_cast<unsigned>(left)) - 1u);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      _mm512_mask_storeu_ps(a.y + (m + i) * a.N + n + j * kVec, mask, acc[i][j]);
    }
  }
}

// Rows [m, m + mr) for mr in [1, MR]: TilePairs with the largest tile that fits.
template <bool kNative, int MR, int NV, bool kPrefetch>
void TileRows(const BlockedArgs& a, int mr, const uint16_t* wv0, int64_t m, int64_t n, int64_t t0,
              int64_t t1, float* acc_io) {
  if constexpr (MR > 1) {
    if (mr < MR) return TileRows<kNative, MR - 1, NV, kPrefetch>(a, mr, wv0, m, n, t0, t1, acc_io);
  }
  TilePairs<kNative, MR, NV, kPrefetch>(a, wv0, m, n, t0, t1, acc_io);
}

template <bool kNative>
void MatMulBlocked(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                   int64_t n1, float* y) {
  const BlockedArgs a{xb, K, w.rows, y};
  const auto* base = static_cast<const uint16_t*>(w.data);
  const int64_t kp = Bf16PaddedCols(K), all = (K + 1) / 2;
  // Tiles of 4 activation rows × 4 vectors (the whole 64-row block). M ≤ 4 streams each block
  // once with 4+ independent chains. Larger M walks the block in chunks of kChunkPairs pairs
  // (16 KB of weights, then in L1) and runs every 4-row tile over a chunk before the next one,
  // the sums parked in acc between chunks; the last tile, whose loads hit L1, prefetches the
  // next chunk, so memory keeps streaming while the tiles compute. Measured at M = 8 (one
  // thread): 4×4 beat 8 rows × 2 vectors, 8 × 1 and 6 × 4. The 0.6B LM head at M = 8 (2
  // threads, alternating runs): whole block per tile (the second tile from L2) 8.8–11.4 ms;
  // chunked with the first tile prefetching 6.9–7.7; the last tile prefetching 6.4–8.2, lower
  // than the first in most pairs.
  constexpr int kMr = 4;
  constexpr int64_t kMaxTiles = 8;  // 32 rows at a time (oneDNN takes M >= 32 when present)
  alignas(64) float acc[kMaxTiles][kMr * 4 * kVec];
  for (int64_t nb = n0 / kBf16BlockN; nb * kBf16BlockN < n1; ++nb) {
    const uint16_t* blk = base + nb * kp * kBf16BlockN;
    const int64_t n = nb * kBf16BlockN;
    for (int64_t m0 = 0; m0 < M; m0 += kMr * kMaxTiles) {
      const int64_t rows = std::min(M - m0, kMr * kMaxTiles);
      const int64_t tiles = (rows + kMr - 1) / kMr;
      for (int64_t i = 0; i < tiles; ++i) std::fill_n(acc[i], kMr * 4 * kVec, 0.0f);
      const int64_t chunk = tiles == 1 ? all : kChunkPairs;
      for (int64_t t0 = 0; t0 < all; t0 += chunk) {
        const int64_t t1 = std::min(all, t0 + chunk);
        for (int64_t i = 0; i < tiles; ++i) {
          const int mr = static_cast<int>(std::min<int64_t>(kMr, rows - i * kMr));
          if (i == tiles - 1 && tiles > 1) {
            TileRows<kNative, kMr, 4, true>(a, mr, blk, m0 + i * kMr, n, t0, t1, acc[i]);
          } else {
            TileRows<kNative, kMr, 4, false>(a, mr, blk, m0 + i * kMr, n, t0, t1, acc[i]);
          }
        }
      }
    }
  }
}

}  // namespace

void MatMulBf16Blocked(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                       int64_t n1, float* y) {
  MatMulBlocked<true>(xb, M, K, w, n0, n1, y);
}

void MatMulBf16BlockedNoBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                             int64_t n1, float* y) {
  MatMulBlocked<false>(xb, M, K, w, n0, n1, y);
}

}  // namespace vls::kernels::avx512_internal
