// The Q4 kernels (kernels/q4.h) for the AVX512-VNNI variants: vpdpbusd of the 4-bit weight codes
// (u8, unpacked in registers from one 64-byte load: low nibbles, then high nibbles) with the
// s8 activations (broadcast 4 columns of one row), int32 sums per 32-column group. Compiled with
// -mavx512vnni; only called after the CPU check in dispatch.cc. Every result equals the
// reference's bit for bit: group dot products are exact integers (|dot| <= 32·15·127), and per
// (m, n) the f32 combination is the reference's t = f32(dot) · d, t = fma(m, Σqx, t),
// acc = fma(t, s, acc) in group order.
//
// One kernel for every M, tiled as the Q8 kernel (matmul_avx512_vnni.cc): MR activation rows ×
// NG groups of 16 weight rows. Decode (M <= 3) takes one row group per tile, one weight stream
// per thread (ADR 0021) left to the hardware prefetcher (ADR 0027: a software prefetch, and a
// second load of each line, cost the Zen 5 host's cores about a tenth of their stream), with
// two accumulators per output vector at M <= 2 (low and high nibbles, the high ones kept in
// place as 16·h) to hide the vpdpbusd latency; batched decode and prefill take up
// to 8 rows (balanced tile heights) × 2 row groups, prefill with the weights in chunks that stay
// in L2 while every row tile passes over them, the later passes prefetching the next chunk
// (ADR 0037).
//
// Built a second time with VLS_AVX512_EMULATION (kernels/avx512_emulation.h, scalar stand-ins
// for the intrinsics used here) into q4_test, so the tiling and epilogue are also tested on CPUs
// without AVX-512.
#ifdef VLS_AVX512_EMULATION
#include "kernels/avx512_emulation.h"
#else
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/matmul_tiles.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"

namespace vls::kernels {

namespace {

inline __mmask16 Mask16(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}

// The lanes of row group G's 16 outputs that lie in columns [n0, n1).
inline __mmask16 GroupMask(int64_t G, int64_t n0, int64_t n1) {
  const int64_t nbase = G * 16;
  const int64_t lo = std::max(n0, nbase) - nbase, hi = std::min(n1, nbase + 16) - nbase;
  return static_cast<__mmask16>(Mask16(hi) & ~Mask16(lo));
}

// One group of 32 values: the scale, Σq, and the s8 codes. No clamp: |x| <= amax, so
// |x · fl(127 / amax)| <= 127 · (1 + 2⁻²⁴) rounds to at most 127 (as the Q8 kernel).
void QuantizeQ4ActivationsVnni(const float* x, int64_t r0, int64_t r1, const Q4Activations& a) {
  const int64_t K = a.cols, ng = a.groups;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      const float* xg = x + r * K + g * kQ4Group;
      int8_t* qg = a.q + r * K + g * kQ4Group;
      const __m512 v0 = _mm512_loadu_ps(xg), v1 = _mm512_loadu_ps(xg + 16);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask)));
      const bool nonzero = amax >= kQ8MinActivationAmax;
      const __m512 inv = _mm512_set1_ps(nonzero ? 127.0f / amax : 0.0f);
      // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint.
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qg), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qg + 16), _mm512_cvtsepi32_epi8(q1));
      a.scales[r * ng + g] = nonzero ? amax / 127.0f : 0.0f;
      a.sums[r * ng + g] = static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
    }
  }
}

// One Q4 product: x[M, K] (quantized, row-major) times the blocked weights.
struct Q4Problem {
  const int8_t* xq;   // [M, K]
  const float* xs;    // [M, ng]
  const float* xsum;  // [M, ng]
  int64_t M, K, ng;
  const uint8_t* w;  // [row groups, ng] blocks of kQ4BlockBytes
  int64_t N;
  float* y;
};

inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc + w · x (vpdpbusd, u8 codes × s8 activations). The empty asm pins the result to a
// register, as in the Q8 kernel (GCC 12 otherwise shuffles the accumulators between registers).
inline __m512i Dpbusd(__m512i acc, __m512i w, __m512i x) {
  __m512i r = _mm512_dpbusd_epi32(acc, w, x);
#ifndef VLS_AVX512_EMULATION
  asm("" : "+v"(r));
#endif
  return r;
}

// Outputs y[m0 .. m0+MR, 16 G0 .. 16 (G0+NG)] restricted to columns [n0, n1). kSplit keeps the
// low- and high-nibble products in separate accumulators (more independent chains).
template <int MR, int NG, tiles::Prefetch kPf, bool kSplit>
void Tile(const Q4Problem& p, int64_t m0, int64_t G0, int64_t n0, int64_t n1,
          const tiles::ChunkPrefetch& pf = {}) {
  constexpr bool kPrefetch = kPf == tiles::Prefetch::kTileAhead;
  const int64_t K = p.K, ng = p.ng;
  const int64_t gstride = ng * kQ4BlockBytes;  // bytes between row groups
  const uint8_t* wg = p.w + G0 * gstride;
  const int8_t* xm = p.xq + m0 * K;
  // Several row groups prefetch the same block of the next tile's row groups (contiguous, so
  // the matrix streams one tile ahead of the loads); a single row group (a prefill tile's
  // remainder) prefetches 8 blocks ahead in its own stream, running into the next row group
  // near its end.
  const int64_t ahead = NG == 1 ? 8 * kQ4BlockBytes : NG * gstride;
  const int64_t next_ahead = pf.chunk * gstride;  // kNextChunk (tiles::ChunkPrefetch)
  int64_t pf_count = 0;
  const __m512i nibble = _mm512_set1_epi8(15);
  const __m512i high_nibble = _mm512_set1_epi8(static_cast<char>(0xf0));
  // The f32 sums: in registers when they fit beside the int32 ones and the weights (MR·NG <= 12),
  // else in memory (they change once per group, the registers hold the int32 sums).
  constexpr bool kRegs = MR * NG <= 12;
  // NOLINTBEGIN(bugprone-branch-clone): the sizes differ per instantiation
  __m512 racc[kRegs ? MR : 1][kRegs ? NG : 1];
  alignas(64) float macc[kRegs ? 1 : MR][kRegs ? 1 : NG][16];
  // NOLINTEND(bugprone-branch-clone)
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) {
      if constexpr (kRegs) {
        racc[i][j] = _mm512_setzero_ps();
      } else {
        _mm512_store_ps(macc[i][j], _mm512_setzero_ps());
      }
    }
  }
  for (int64_t g = 0; g < ng; ++g) {
    // NOLINTNEXTLINE(bugprone-branch-clone): the branches differ per instantiation
    __m512i acc[MR][NG], acc_hi[kSplit ? MR : 1][kSplit ? NG : 1];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NG; ++j) {
        acc[i][j] = _mm512_setzero_si512();
        if constexpr (kSplit) acc_hi[i][j] = _mm512_setzero_si512();
      }
    }
    const int8_t* xg = xm + g * kQ4Group;
    if constexpr (kPf == tiles::Prefetch::kNextChunk) {
      // This block's five lines (codes, scales and mins) in the next chunk's row groups.
      if (pf_count == pf.phase) {
#pragma GCC unroll 4
        for (int j = 0; j < NG; ++j) {
          const char* bp = reinterpret_cast<const char*>(wg + j * gstride + g * kQ4BlockBytes);
#pragma GCC unroll 5
          for (int l = 0; l < kQ4BlockBytes / 64; ++l)
            _mm_prefetch(bp + next_ahead + 64 * l, _MM_HINT_T0);
        }
      }
      if (++pf_count == pf.every) pf_count = 0;
    }
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      __m512i lo[NG], hi[NG];
#pragma GCC unroll 4
      for (int j = 0; j < NG; ++j) {
        const uint8_t* bp = wg + j * gstride + g * kQ4BlockBytes + 64 * v;
        if constexpr (kPrefetch)
          _mm_prefetch(reinterpret_cast<const char*>(bp + ahead), _MM_HINT_T0);
        __m512i packed = _mm512_loadu_si512(bp);
#ifndef VLS_AVX512_EMULATION
        asm("" : "+v"(packed));  // one load (GCC would fold it into both uses below)
#endif
        lo[j] = _mm512_and_si512(packed, nibble);
        // Split: the high nibbles in place (16·h), their sum shifted back once per group.
        hi[j] = kSplit ? _mm512_and_si512(packed, high_nibble)
                       : _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512i xl = Broadcast4(xg + i * K + 4 * v);
        const __m512i xh = Broadcast4(xg + i * K + 16 + 4 * v);
#pragma GCC unroll 4
        for (int j = 0; j < NG; ++j) {
          acc[i][j] = Dpbusd(acc[i][j], lo[j], xl);
          if constexpr (kSplit) {
            acc_hi[i][j] = Dpbusd(acc_hi[i][j], hi[j], xh);
          } else {
            acc[i][j] = Dpbusd(acc[i][j], hi[j], xh);
          }
        }
      }
    }
    // Per (m, n) the reference's t = f32(dot) · d, t = fma(m, Σqx, t), acc = fma(t, s, acc).
    __m512 d[NG], mn[NG];
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) {
      const uint8_t* sp = wg + j * gstride + g * kQ4BlockBytes + kQ4ScalesOffset;
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(sp + ahead), _MM_HINT_T0);
      d[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp)));
      mn[j] = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(sp + (kQ4MinsOffset - kQ4ScalesOffset))));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xsum = _mm512_set1_ps(p.xsum[(m0 + i) * ng + g]);
      const __m512 xs = _mm512_set1_ps(p.xs[(m0 + i) * ng + g]);
#pragma GCC unroll 4
      for (int j = 0; j < NG; ++j) {
        __m512i dot = acc[i][j];
        // acc_hi = 16·Σ h·x exactly (|16·dot| < 2³¹), so the arithmetic shift is exact.
        if constexpr (kSplit) dot = _mm512_add_epi32(dot, _mm512_srai_epi32(acc_hi[i][j], 4));
        __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), d[j]);
        t = _mm512_fmadd_ps(mn[j], xsum, t);
        if constexpr (kRegs) {
          racc[i][j] = _mm512_fmadd_ps(t, xs, racc[i][j]);
        } else {
          _mm512_store_ps(macc[i][j], _mm512_fmadd_ps(t, xs, _mm512_load_ps(macc[i][j])));
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NG; ++j) {
    const int64_t nbase = (G0 + j) * 16;
    const __mmask16 mask = GroupMask(G0 + j, n0, n1);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
      _mm512_mask_storeu_ps(p.y + (m0 + i) * p.N + nbase, mask,
                            kRegs ? racc[i][j] : _mm512_load_ps(macc[i][j]));
  }
}

// Tiles of at most MR rows × NG row groups (the last one smaller) over row groups [G0, G1),
// walked in chunks of kChunk row groups that stay in L2 while every row tile passes; the row
// tiles have balanced heights (tiles::ForEachBalancedRowTile).
template <int MR, int NG, bool kPrefetch>
struct Tiling {
  static constexpr int64_t kChunk = 8;
  static constexpr tiles::Prefetch kAhead =
      kPrefetch ? tiles::Prefetch::kTileAhead : tiles::Prefetch::kNone;

  template <int R, tiles::Prefetch kPf>
  static void Rows(const Q4Problem& p, int64_t m0, int64_t G, int64_t nrg, int64_t n0, int64_t n1,
                   const tiles::ChunkPrefetch& pf) {
    if (nrg == NG) {
      Tile<R, NG, kPf, (R <= 2)>(p, m0, G, n0, n1, pf);
    } else {
      for (int64_t k = 0; k < nrg; ++k) Tile<R, 1, kPf, true>(p, m0, G + k, n0, n1, pf);
    }
  }

  static void Run(const Q4Problem& p, int64_t n0, int64_t n1) {
    const int64_t G0 = n0 / 16, G1 = (n1 + 15) / 16;
    // One row tile's pass over a chunk, its tiles taking the pass's prefetch.
    const auto pass = [&](int64_t m0, int64_t mr, int64_t gc, int64_t ge,
                          const tiles::ChunkPrefetch& pf, auto kind) {
      for (int64_t G = gc; G < ge; G += NG) {
        const int64_t nrg = std::min<int64_t>(NG, ge - G);
        tiles::DispatchHeight<MR>(mr, [&](auto r) {
          Rows<decltype(r)::value, decltype(kind)::value>(p, m0, G, nrg, n0, n1, pf);
        });
      }
    };
    tiles::ForEachChunkPass<MR, kAhead>(p.M, G0, G1, kChunk, pass);
  }
};

void MatMulQ4Vnni(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const Q4Problem p{
      x.q,    x.scales, x.sums, x.rows, x.cols, x.groups, static_cast<const uint8_t*>(w.data),
      w.rows, y};
  if (p.M <= 3) {
    switch (p.M) {
      case 1: return Tiling<1, 1, false>::Run(p, n0, n1);
      case 2: return Tiling<2, 1, false>::Run(p, n0, n1);
      default: return Tiling<3, 1, false>::Run(p, n0, n1);
    }
  }
  if (p.M <= 16) return Tiling<8, 2, true>::Run(p, n0, n1);
  Tiling<8, 2, false>::Run(p, n0, n1);
}

// One Q6 product (kernels/q6.h): the same activations, the 6-bit codes and their F16 scales.
struct Q6Problem {
  const int8_t* xq;   // [M, K]
  const float* xs;    // [M, ng]
  const float* xsum;  // [M, ng]
  int64_t M, K, ng;
  const uint8_t* w;       // [row groups, ng] blocks of kQ6CodeBytes
  const uint8_t* scales;  // [row groups, ng, 16] F16
  int64_t N;
  float* y;
};

// Bits 4-5 of each byte of code vector v (0..3) from the high-bit vector h: bit pair v of every
// byte shifted to bits 4-5 (16-bit shifts; the mask drops what crossed a byte).
inline __m512i HighBits(__m512i h, int v, __m512i mask) {
  switch (v) {
    case 0: return _mm512_and_si512(_mm512_slli_epi16(h, 4), mask);
    case 1: return _mm512_and_si512(_mm512_slli_epi16(h, 2), mask);
    case 2: return _mm512_and_si512(h, mask);
    default: return _mm512_and_si512(_mm512_srli_epi16(h, 2), mask);
  }
}

// The u8 codes of vector v (0..3) of a block: low nibbles of `packed` with the high bits of h0
// (columns 0-15 of the group), high nibbles with those of h1 (columns 16-31).
inline void Q6Codes(__m512i packed, __m512i h0, __m512i h1, int v, __m512i nibble, __m512i high,
                    __m512i& lo, __m512i& hi) {
  lo = _mm512_or_si512(_mm512_and_si512(packed, nibble), HighBits(h0, v, high));
  hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble),
                       HighBits(h1, v, high));
}

// Outputs y[m0 .. m0+MR, 16 G0 .. 16 (G0+NG)] restricted to columns [n0, n1), as the Q4 Tile
// (low and high column halves in separate accumulators); kPrefetch streams one tile ahead.
template <int MR, int NG, bool kPrefetch>
void Q6Tile(const Q6Problem& p, int64_t m0, int64_t G0, int64_t n0, int64_t n1) {
  constexpr int64_t kAhead = 8;
  const int64_t K = p.K, ng = p.ng;
  const int64_t gstride = ng * kQ6CodeBytes;  // code bytes between row groups
  const int64_t sstride = ng * 32;            // scale bytes between row groups
  const uint8_t* wg = p.w + G0 * gstride;
  const uint8_t* sg = p.scales + G0 * sstride;
  const int8_t* xm = p.xq + m0 * K;
  const __m512i nibble = _mm512_set1_epi8(15), high = _mm512_set1_epi8(0x30);
  alignas(64) float facc[MR][NG][16] = {};
  for (int64_t g = 0; g < ng; ++g) {
    __m512i acc[MR][NG], acc_hi[MR][NG], h[NG][2];
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) {
      const uint8_t* bp = wg + j * gstride + g * kQ6CodeBytes;
      if constexpr (kPrefetch) {
        // kAhead blocks further down this row group's streams (into the next row groups, which
        // follow in memory, near the end).
#pragma GCC unroll 6
        for (int c = 0; c < 6; ++c) {
          _mm_prefetch(reinterpret_cast<const char*>(bp + kAhead * kQ6CodeBytes + 64 * c),
                       _MM_HINT_T0);
        }
        if (g % 2 == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(sg + j * sstride + (g + kAhead) * 32),
                       _MM_HINT_T0);
        }
      }
      h[j][0] = _mm512_loadu_si512(bp + kQ6HighOffset);
      h[j][1] = _mm512_loadu_si512(bp + kQ6HighOffset + 64);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm512_setzero_si512();
        acc_hi[i][j] = _mm512_setzero_si512();
      }
    }
    const int8_t* xg = xm + g * kQ6Group;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      __m512i lo[NG], hi[NG];
#pragma GCC unroll 4
      for (int j = 0; j < NG; ++j) {
        const __m512i packed = _mm512_loadu_si512(wg + j * gstride + g * kQ6CodeBytes + 64 * v);
        Q6Codes(packed, h[j][0], h[j][1], v, nibble, high, lo[j], hi[j]);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512i xl = Broadcast4(xg + i * K + 4 * v);
        const __m512i xh = Broadcast4(xg + i * K + 16 + 4 * v);
#pragma GCC unroll 4
        for (int j = 0; j < NG; ++j) {
          acc[i][j] = Dpbusd(acc[i][j], lo[j], xl);
          acc_hi[i][j] = Dpbusd(acc_hi[i][j], hi[j], xh);
        }
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) {
      const __m512 d = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg + j * sstride + g * 32)));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const int64_t mg = (m0 + i) * ng + g;
        const __m512i zero_point = _mm512_set1_epi32(kQ6Zero * static_cast<int32_t>(p.xsum[mg]));
        const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(acc[i][j], acc_hi[i][j]), zero_point);
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), d);
        _mm512_store_ps(facc[i][j],
                        _mm512_fmadd_ps(t, _mm512_set1_ps(p.xs[mg]), _mm512_load_ps(facc[i][j])));
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NG; ++j) {
    const int64_t nbase = (G0 + j) * 16;
    const __mmask16 mask = GroupMask(G0 + j, n0, n1);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
      _mm512_mask_storeu_ps(p.y + (m0 + i) * p.N + nbase, mask, _mm512_load_ps(facc[i][j]));
  }
}

// One tile of 3 <= MR <= 8 rows × 1 row group (batched decode: 8 slots' LM head). Each row's
// int32 sum starts at its group's zero-point term −kQ6Zero·Σqx (zp [M, ng], once per call) and
// the f32 sums stay in registers, so a group's epilogue is a convert, a multiply and an fma per
// row; Q6Tile converts the zero point from Σqx per row and group and moves it to a vector
// register, which a profile of the 8-row head put among its hottest instructions (ADR 0027).
// The rows are the independent chains, so the column halves share one accumulator. The same
// integers and f32 operations in the same order as Q6Tile.
template <int MR>
void Q6RowTile(const Q6Problem& p, const int32_t* zp, int64_t G, int64_t n0, int64_t n1) {
  constexpr int64_t kAhead = 8;
  const int64_t K = p.K, ng = p.ng;
  const uint8_t* wg = p.w + G * ng * kQ6CodeBytes;
  const uint8_t* sg = p.scales + G * ng * 32;
  const __m512i nibble = _mm512_set1_epi8(15), high = _mm512_set1_epi8(0x30);
  __m512 facc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) facc[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* bp = wg + g * kQ6CodeBytes;
    // kAhead blocks further down the row group's stream, as Q6Tile.
#pragma GCC unroll 6
    for (int c = 0; c < 6; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(bp + kAhead * kQ6CodeBytes + 64 * c), _MM_HINT_T0);
    }
    if (g % 2 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(sg + (g + kAhead) * 32), _MM_HINT_T0);
    const __m512i h0 = _mm512_loadu_si512(bp + kQ6HighOffset);
    const __m512i h1 = _mm512_loadu_si512(bp + kQ6HighOffset + 64);
    __m512i acc[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i] = _mm512_set1_epi32(zp[i * ng + g]);
    const int8_t* xg = p.xq + g * kQ6Group;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i packed = _mm512_loadu_si512(bp + 64 * v);
      __m512i lo, hi;
      Q6Codes(packed, h0, h1, v, nibble, high, lo, hi);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i] = Dpbusd(acc[i], lo, Broadcast4(xg + i * K + 4 * v));
        acc[i] = Dpbusd(acc[i], hi, Broadcast4(xg + i * K + 16 + 4 * v));
      }
    }
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg + g * 32)));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]), d);
      facc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(p.xs[i * ng + g]), facc[i]);
    }
  }
  const int64_t nbase = G * 16;
  const __mmask16 mask = GroupMask(G, n0, n1);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(p.y + i * p.N + nbase, mask, facc[i]);
}

// MR-row tiles over row groups [G, G + nrg): NG at a time, then one by one.
template <int MR, int NG>
void Q6Rows(const Q6Problem& p, int64_t m0, int64_t G, int64_t nrg, int64_t n0, int64_t n1) {
  int64_t k = 0;
  for (; k + NG <= nrg; k += NG) Q6Tile<MR, NG, true>(p, m0, G + k, n0, n1);
  for (; k < nrg; ++k) Q6Tile<MR, 1, true>(p, m0, G + k, n0, n1);
}

// Up to 8 rows but 4: one tile of all rows × 1 row group (one weight stream, as the Q4 kernel;
// ADR 0021). Otherwise tiles of 4 rows × 2 row groups over chunks of 8 row groups that stay in
// L2 while every row tile passes.
void MatMulQ6Vnni(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const Q6Problem p{x.q,    x.scales, x.sums, x.rows,
                    x.cols, x.groups, base,   base + Q6ScalesOffset(w.rows, w.cols),
                    w.rows, y};
  const int64_t G0 = n0 / 16, G1 = (n1 + 15) / 16;
  if (p.M <= 8 && p.M != 4) {
    // Decode and batched decode (8 slots: the LM head of every step): one tile of all M rows × 1
    // row group, so each vector's high bits are merged once for all rows. At 8 rows of the Qwen3
    // head (151936 × 2048) 8.0 → 7.0 ms on 2 Zen 5 threads against 4 × 2 tiles (ADR 0027); at 4
    // and 16 rows one tile was no faster than the 4 × 2 tiles below.
    // One and two rows keep Q6Tile, whose column halves are two chains per row; from 3 rows the
    // rows are enough chains for Q6RowTile.
    if (p.M <= 2) {
      tiles::DispatchHeight<2>(
          p.M, [&](auto r) { Q6Rows<decltype(r)::value, 1>(p, 0, G0, G1 - G0, n0, n1); });
      return;
    }
    std::vector<int32_t> zp(static_cast<size_t>(p.M * p.ng));
    for (size_t i = 0; i < zp.size(); ++i) zp[i] = -kQ6Zero * static_cast<int32_t>(p.xsum[i]);
    tiles::DispatchHeight<8>(p.M, [&](auto r) {
      for (int64_t G = G0; G < G1; ++G) Q6RowTile<decltype(r)::value>(p, zp.data(), G, n0, n1);
    });
    return;
  }
  constexpr int64_t kChunk = 8;
  for (int64_t gc = G0; gc < G1; gc += kChunk) {
    const int64_t nrg = std::min(G1, gc + kChunk) - gc;
    for (int64_t m0 = 0; m0 < p.M; m0 += 4) {
      switch (std::min<int64_t>(4, p.M - m0)) {
        case 1: Q6Rows<1, 2>(p, m0, gc, nrg, n0, n1); break;
        case 2: Q6Rows<2, 2>(p, m0, gc, nrg, n0, n1); break;
        case 3: Q6Rows<3, 2>(p, m0, gc, nrg, n0, n1); break;
        default: Q6Rows<4, 2>(p, m0, gc, nrg, n0, n1); break;
      }
    }
  }
}

}  // namespace

#ifdef VLS_AVX512_EMULATION
const Q4Kernels& EmulatedAvx512VnniQ4Kernels() {
  static const Q4Kernels k = {"avx512vnni (emulated)", QuantizeQ4ActivationsVnni, MatMulQ4Vnni,
                              MatMulQ6Vnni};
  return k;
}
#else
const Q4Kernels* Avx512VnniQ4Kernels() {
  static const Q4Kernels k = {"avx512vnni", QuantizeQ4ActivationsVnni, MatMulQ4Vnni, MatMulQ6Vnni};
  return &k;
}
#endif

}  // namespace vls::kernels
