// The blocking loop shared by the AVX-512 matmul variants (included only by their .cc files,
// which are compiled with AVX-512 flags; nothing here is used by baseline code).
//
// y[M, n0:n1] is computed in register tiles of MR activation rows × NR weight rows, each a
// dot product over the full K held in NR·MR vector accumulators. Weight rows are walked in
// chunks of kNChunk so a chunk stays in L2 while every row block of x passes over it: each
// weight byte comes from memory once per call whatever M is (batched decode, prefill).
#ifndef VLSTACK_KERNELS_MATMUL_TILES_H_
#define VLSTACK_KERNELS_MATMUL_TILES_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/quant.h"

namespace vls::kernels {
namespace avx512_internal {
// BF16 blocked weights (matmul_avx512_bf16_blocked.cc, AVX512-BF16). REQUIRES: n0 a multiple
// of kBf16BlockN.
void MatMulBf16Blocked(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                       int64_t n1, float* y);
// The same with AVX-512F only (two f32 FMAs per BF16 pair), for "avx512" and "avx512vnni";
// its instructions need no AVX512-BF16 although the file is compiled with it.
void MatMulBf16BlockedNoBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                             int64_t n1, float* y);
// Row-wise RMSNorm and SiLU·up (elementwise_avx512.cc), shared by every AVX-512 variant.
void RmsNorm(const float* x, int64_t M, int64_t n, const float* weight, float eps, float* out);
void SiluMul(float* gate, const float* up, int64_t n);
void WeightedRows(const float* w, const float* const* rows, int64_t k, int64_t n, float* out);
void ToBf16(const float* x, int64_t n, uint16_t* out);
void ApplyRope(float* x, const float* cos, const float* sin, int64_t D);
}  // namespace avx512_internal
}  // namespace vls::kernels

namespace vls::kernels::tiles {

inline constexpr int kMr = 4;
inline constexpr int kNr = 4;
inline constexpr int64_t kNChunk = 32;

// Calls Tile::template Run<mr, nr>(m, n) for every tile, with the remainders as smaller tiles.
template <typename Tile>
inline void ForEachTile(int64_t M, int64_t n0, int64_t n1, const Tile& tile) {
  for (int64_t nc = n0; nc < n1; nc += kNChunk) {
    const int64_t ne = std::min(n1, nc + kNChunk);
    for (int64_t m = 0; m < M; m += kMr) {
      const int64_t mr = std::min<int64_t>(kMr, M - m);
      for (int64_t n = nc; n < ne; n += kNr) {
        const int64_t nr = std::min<int64_t>(kNr, ne - n);
        tile.Dispatch(static_cast<int>(mr), static_cast<int>(nr), m, n);
      }
    }
  }
}

// Switches runtime (mr, nr) in [1, kMr] × [1, kNr] to a compile-time Run<MR, NR>.
template <typename Tile, int MR = 1>
inline void DispatchMr(const Tile& tile, int mr, int nr, int64_t m, int64_t n) {
  if constexpr (MR <= kMr) {
    if (mr != MR) return DispatchMr<Tile, MR + 1>(tile, mr, nr, m, n);
    switch (nr) {
      case 1: return tile.template Run<MR, 1>(m, n);
      case 2: return tile.template Run<MR, 2>(m, n);
      case 3: return tile.template Run<MR, 3>(m, n);
      default: return tile.template Run<MR, 4>(m, n);
    }
  }
}

// Row tiles of balanced heights for the quantized kernels: ceil(M / MR) tiles whose heights
// differ by at most one, so 32 rows at MR 6 run as 6, 6, 5, 5, 5, 5 and not as five 6s and a
// 2-row tile whose few accumulator chains would wait on the instruction latency. Calls
// f(m0, mr) for each tile in order; nothing for M <= 0.
template <int MR, typename F>
inline void ForEachBalancedRowTile(int64_t M, const F& f) {
  if (M <= 0) return;
  const int64_t tiles = (M + MR - 1) / MR, base = M / tiles, taller = M % tiles;
  int64_t m0 = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t mr = base + (t < taller ? 1 : 0);
    f(m0, mr);
    m0 += mr;
  }
}

// How a quantized tile (the Q4 and Q8 VNNI kernels) prefetches its weights: not at all (the
// hardware prefetcher carries one stream), one tile ahead in its own stream (prefill tiles of
// one or two passes), or the next chunk's blocks as a ChunkPrefetch says (ADR 0037).
enum class Prefetch { kNone, kTileAhead, kNextChunk };

// A pass of a prefill tiling over one chunk of row groups. With T >= 3 row tiles the chunk's
// first pass reads its weights from memory and the others from L2; passes 2..T then prefetch
// the next chunk, pass t the K blocks b with b ≡ t - 2 (mod T - 1) of each of its groups, so
// the next chunk arrives at one prefetched line per T - 1 loaded ones while the core computes,
// and its own first pass reads from L2 (ADR 0037). Before a short last chunk the prefetches
// run past the range (at most a chunk; a prefetch never faults). `every` 0: this pass
// prefetches nothing.
struct ChunkPrefetch {
  int64_t every = 0;
  int64_t phase = 0;
  int64_t chunk = 0;  // groups between a group and the one it prefetches
};

// Calls f(m0, mr, gc, ge, pf, kind) for every chunk [gc, ge) of `chunk` groups of [g0, g1) and
// every balanced row tile (m0, mr) of M rows in it: pf the pass's ChunkPrefetch, kind a
// std::integral_constant of the Prefetch its tiles take. kNextChunk where pf prefetches; with
// three row tiles or more kNone otherwise (a chunk's first pass, the last chunk); with fewer,
// kFew (the tiling's prefetch for one or two passes).
template <int MR, Prefetch kFew, typename F>
inline void ForEachChunkPass(int64_t M, int64_t g0, int64_t g1, int64_t chunk, const F& f) {
  const int64_t passes = (M + MR - 1) / MR;
  for (int64_t gc = g0; gc < g1; gc += chunk) {
    const int64_t ge = std::min(g1, gc + chunk);
    int64_t t = 0;
    ForEachBalancedRowTile<MR>(M, [&](int64_t m0, int64_t mr) {
      if (passes < 3) {
        f(m0, mr, gc, ge, ChunkPrefetch{}, std::integral_constant<Prefetch, kFew>{});
      } else if (t > 0 && ge < g1) {
        f(m0, mr, gc, ge, ChunkPrefetch{passes - 1, t - 1, chunk},
          std::integral_constant<Prefetch, Prefetch::kNextChunk>{});
      } else {
        f(m0, mr, gc, ge, ChunkPrefetch{}, std::integral_constant<Prefetch, Prefetch::kNone>{});
      }
      ++t;
    });
  }
}

// Calls f(std::integral_constant<int, R>{}) for the runtime height R = mr in [1, MR].
template <int MR, typename F>
inline void DispatchHeight(int64_t mr, const F& f) {
  if constexpr (MR > 1) {
    if (mr < MR) return DispatchHeight<MR - 1>(mr, f);
  }
  f(std::integral_constant<int, MR>{});
}

}  // namespace vls::kernels::tiles

#endif  // VLSTACK_KERNELS_MATMUL_TILES_H_
