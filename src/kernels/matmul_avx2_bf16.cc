// The matmul on BF16 blocked weights (kernels/bf16_blocked.h) of the "avx2" variant: the
// broadcast form of matmul_avx512_bf16_blocked.cc with 8-lane vectors and no BF16 dot
// products. For each column pair t, the 64 weight rows of an n-block lie in eight contiguous
// vectors of 8 rows × 2 columns. Unpacking a vector with zeros widens it to two f32 vectors,
// lo = (rows 0, 1 | 4, 5) and hi = (2, 3 | 6, 7), each as (even, odd) column pairs; the
// activation row's pair, widened once per chunk into an f32 buffer, is broadcast as one 64-bit
// value (even, odd, even, odd, ...) and FMA'd into both. So each output is two f32 chains, its
// even and its odd columns, added by one horizontal add per 8 outputs at the end. One
// broadcast feeds two FMAs (with a shift and an AND per vector instead, as the AVX-512F kernel
// widens, it took two broadcasts and ran prefill 15% slower); each widened weight vector feeds
// every activation row of the tile, and the weights stream sequentially. Products of two BF16
// values are exact in f32.
//
// Every output is the same two chains over the pairs in order, whatever the tile shape, so a
// row's result does not depend on M (batched decode equals single-row decode bit for bit).
// Compiled with -mavx2 -mfma -mf16c; only called after the CPU check.
#include "kernels/matmul_avx2_bf16.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/bf16_blocked.h"

namespace vls::kernels::avx2_internal {

namespace {

constexpr int kLanes = 8;                           // outputs per vector
constexpr int kVecs = kBf16BlockN / kLanes;         // vectors per column pair of an n-block
constexpr int64_t kPairStride = 2 * kBf16BlockN;    // values per column pair of an n-block
constexpr int64_t kChunkPairs = 32;                 // pairs per chunk: 8 KiB of weights
constexpr int kMr = 6;                              // most activation rows per tile
constexpr int64_t kGroupRows = 4 * kMr;             // activation rows per pass over a chunk
constexpr int64_t kAccFloats = kVecs * 2 * kLanes;  // parked sums per row: [vec][lo/hi][8]

// The activations of one group and chunk widened to f32, [row][2 · kChunkPairs], and the parked
// sums of the group, [row][kAccFloats]: 6 + 12 KiB, in L1 with the weight chunk.
struct Scratch {
  alignas(32) float x[kGroupRows][2 * kChunkPairs];
  alignas(32) float acc[kGroupRows][kAccFloats];
};

// xf[r][0 : 2·(t1 - t0)] = columns [2·t0, 2·t1) of activation rows m0 + r, widened, 0 past K.
void WidenChunk(const uint16_t* xb, int64_t K, int64_t m0, int64_t rows, int64_t t0, int64_t t1,
                Scratch& s) {
  const int64_t c0 = 2 * t0, c1 = 2 * t1, real = std::min(K, c1);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* src = xb + (m0 + r) * K;
    float* dst = s.x[r];
    int64_t c = c0;
    for (; c + kLanes <= real; c += kLanes) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c));
      _mm256_store_ps(dst + (c - c0),
                      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; c < real; ++c)
      dst[c - c0] = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(src[c] << 16)));
    for (; c < c1; ++c) dst[c - c0] = 0.0f;  // the odd column's partner past K
  }
}

// Pairs [0, pairs) of the chunk for activation rows [r, r + MR) of the group and vectors
// [v0, v0 + NV) of the n-block, whose chunk starts at wc. kPrefetch: also prefetch the weights
// kChunkPairs pairs ahead (the next chunk) into L1.
template <int MR, int NV, bool kPrefetch>
void Tile(const uint16_t* wc, int64_t pairs, int r, int v0, Scratch& s) {
  __m256 acc[MR][NV][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      acc[i][j][0] = _mm256_load_ps(s.acc[r + i] + (v0 + j) * 2 * kLanes);
      acc[i][j][1] = _mm256_load_ps(s.acc[r + i] + (v0 + j) * 2 * kLanes + kLanes);
    }
  }
  const __m256i zero = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int64_t t = 0; t < pairs; ++t) {
    const uint16_t* wt = wc + t * kPairStride + v0 * 2 * kLanes;
    if constexpr (kPrefetch) {
      // One prefetch per 64-byte line: two vectors each.
      const char* ahead = reinterpret_cast<const char*>(wt + kChunkPairs * kPairStride);
#pragma GCC unroll 4
      for (int j = 0; j < NV; j += 2) _mm_prefetch(ahead + j * 32, _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + j * 2 * kLanes));
      const __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w));
      const __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_castpd_ps(
            _mm256_broadcast_sd(reinterpret_cast<const double*>(s.x[r + i] + 2 * t)));
        acc[i][j][0] = _mm256_fmadd_ps(xv, lo, acc[i][j][0]);
        acc[i][j][1] = _mm256_fmadd_ps(xv, hi, acc[i][j][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      _mm256_store_ps(s.acc[r + i] + (v0 + j) * 2 * kLanes, acc[i][j][0]);
      _mm256_store_ps(s.acc[r + i] + (v0 + j) * 2 * kLanes + kLanes, acc[i][j][1]);
    }
  }
}

// The whole n-block for rows [r, r + mr) of the group, mr in [1, kMr]: tiles of 8 accumulators
// or more where the rows allow (2 FMA units × 4 cycles of latency want 8 independent chains):
// 1 row × 4 vectors, 2 × 2, then mr rows × 1 vector (12 accumulators at 6 rows, with the two
// widened weights, the broadcast and the zero all 16 ymm registers).
template <bool kPrefetch, int MR = 1>
void RowTile(const uint16_t* wc, int64_t pairs, int mr, int r, Scratch& s) {
  if constexpr (MR < kMr) {
    if (mr > MR) return RowTile<kPrefetch, MR + 1>(wc, pairs, mr, r, s);
  }
  constexpr int kNv = MR == 1 ? 4 : MR == 2 ? 2 : 1;
  for (int v0 = 0; v0 < kVecs; v0 += kNv) Tile<MR, kNv, kPrefetch>(wc, pairs, r, v0, s);
}

}  // namespace

// Per n-block, activation rows in groups of kGroupRows: the block is walked in chunks of
// kChunkPairs pairs (8 KiB of weights, then in L1), each chunk's activations widened once into
// an f32 buffer (a broadcast from it is a plain load), and every row tile of the group runs
// over the chunk before the next one, the sums parked in L1 between chunks. With more than one
// row tile the last one prefetches the next chunk so memory keeps streaming while the tiles
// compute. Measured on one Zen 3 core (K 2048, N 6144): prefetching takes prefill (M 512) from
// about 210 to 176 ms and M 8 from 6.2 to 4.3 ms, but slowed a single tile (M 1, at 16 GB/s
// without it). Groups of 12 rows × 64 pairs ran as fast as 24 × 32; 36 × 32 slower.
void MatMulBf16Blocked(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                       int64_t n1, float* y) {
  const auto* base = static_cast<const uint16_t*>(w.data);
  const int64_t N = w.rows, kp = Bf16PaddedCols(K), all = (K + 1) / 2;
  Scratch s;
  for (int64_t nb = n0 / kBf16BlockN; nb * kBf16BlockN < n1; ++nb) {
    const uint16_t* blk = base + nb * kp * kBf16BlockN;
    const int64_t n = nb * kBf16BlockN;
    for (int64_t m0 = 0; m0 < M; m0 += kGroupRows) {
      const int64_t rows = std::min(M - m0, kGroupRows);
      for (int64_t r = 0; r < rows; ++r) std::fill_n(s.acc[r], kAccFloats, 0.0f);
      for (int64_t t0 = 0; t0 < all; t0 += kChunkPairs) {
        const int64_t t1 = std::min(all, t0 + kChunkPairs);
        WidenChunk(xb, K, m0, rows, t0, t1, s);
        const uint16_t* wc = blk + t0 * kPairStride;
        for (int64_t r = 0; r < rows; r += kMr) {
          const auto mr = static_cast<int>(std::min<int64_t>(kMr, rows - r));
          if (rows > kMr && r + kMr >= rows && t1 < all) {
            RowTile<true>(wc, t1 - t0, mr, static_cast<int>(r), s);
          } else {
            RowTile<false>(wc, t1 - t0, mr, static_cast<int>(r), s);
          }
        }
      }
      // y = even chain + odd chain, clipped to N: hadd(lo, hi) puts the 8 outputs in order.
      for (int v = 0; v < kVecs; ++v) {
        const int64_t col = n + v * kLanes, left = N - col;
        if (left <= 0) break;
        const __m256i mask =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(left, kLanes))),
                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int64_t r = 0; r < rows; ++r) {
          const float* a = s.acc[r] + v * 2 * kLanes;
          _mm256_maskstore_ps(y + (m0 + r) * N + col, mask,
                              _mm256_hadd_ps(_mm256_load_ps(a), _mm256_load_ps(a + kLanes)));
        }
      }
    }
  }
}

}  // namespace vls::kernels::avx2_internal
