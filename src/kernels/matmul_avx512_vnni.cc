// The Q8 kernels of the "avx512vnni" and "avx512bf16" variants: AVX512-VNNI vpdpbusd (u8 × s8,
// int32 sums of 4 products per lane) of the weights flipped to u8 (qw + 128, one xor per loaded
// vector) and the s8 activations (ADR 0032). Compiled with -mavx512vnni; only called after the
// CPU check in dispatch.cc. Every result equals the reference's bit for bit: block dot products
// are exact integers, and per (m, n) the f32 combination is the reference's fma(dot_b · sx, sw,
// acc) in block order.
//
// One kernel for every M. The weights are interleaved (quant.h): one 64-byte vector holds 4
// columns of 16 weight rows, so a vpdpbusd of it with 4 activation bytes of one row (broadcast)
// adds to 16 outputs of that row: no horizontal sums, and block scales load as vectors.
// A register tile is MR activation rows × NG groups of 16 weight rows. A block is 32 columns
// (8 steps): each block's int32 sums of a row start at −128 · Σ qx (the zero point of the u8
// weights: the activations' zero terms, broadcast from memory), so the epilogue per block and
// vector is only convert, multiply by sx and fma with sw (widened from F16) into f32 sums that
// stay in registers (MR · NG ≤ 12: 2 · 12 accumulators plus the operands fit the 32
// vector registers). Decode (M ≤ 3) takes one group per tile, one weight stream per thread
// prefetched 2 KiB ahead (ADR 0021), or, in matmul_q8_four_streams, four groups per tile, four
// streams each prefetched one tile ahead (ADR 0033: the expert products on Zen 5); 7-10 rows
// one tile of all rows × 1 group (ADR 0038); other batched decode and prefill up to 6 rows
// (balanced tile heights) × 2 groups, prefill with the
// weights in chunks that stay in L2 while every row tile passes over them, the later passes
// prefetching the next chunk (ADR 0037).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/matmul_tiles.h"
#include "kernels/q4.h"
#include "kernels/quant.h"

namespace vls::kernels {

namespace {

inline __mmask16 Mask16(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}

// One whole block of kQ8Block values, held in registers between the max and the rounding
// pass; the bytes are narrowed in registers and stored as one vector per 16 values (a
// vpmovdb to memory is several times slower on AMD cores). Returns the block's scale;
// *zero_term is −kQ8WeightFlip · Σ q.
inline float QuantizeFullBlock(const float* x, int8_t* q, int32_t* zero_term) {
  constexpr int kVectors = kQ8Block / 16;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 v[kVectors];
  __m512 mx = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < kVectors; ++i) {
    v[i] = _mm512_loadu_ps(x + 16 * i);
    mx = _mm512_max_ps(mx, _mm512_and_ps(v[i], abs_mask));
  }
  const float amax = _mm512_reduce_max_ps(mx);
  const bool nonzero = amax >= kQ8MinActivationAmax;
  const __m512 inv = _mm512_set1_ps(nonzero ? 127.0f / amax : 0.0f);
  __m512i total = _mm512_setzero_si512();
#pragma GCC unroll 12
  for (int i = 0; i < kVectors; ++i) {
    // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint. No clamp:
    // |x| <= amax, so |x · fl(127 / amax)| <= 127 · (1 + 2⁻²⁴) rounds to at most 127 (the
    // saturating narrow keeps the bytes in range for any input).
    const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], inv));
    total = _mm512_add_epi32(total, qi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * i), _mm512_cvtsepi32_epi8(qi));
  }
  *zero_term = -kQ8WeightFlip * _mm512_reduce_add_epi32(total);
  return nonzero ? amax / 127.0f : 0.0f;
}

void QuantizeQ8Vnni(const float* x, int64_t r0, int64_t r1, Q8Activations* a) {
  const int64_t K = a->cols, nb = a->blocks;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * K;
    int8_t* qr = a->q.data() + r * K;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kQ8Block, k1 = std::min(K, k0 + kQ8Block);
      if (k1 - k0 == kQ8Block) {
        a->scales[size_t(r * nb + b)] =
            QuantizeFullBlock(xr + k0, qr + k0, &a->zero_terms[size_t(r * nb + b)]);
        continue;
      }
      __m512 mx = _mm512_setzero_ps();
      for (int64_t k = k0; k < k1; k += 16) {
        mx = _mm512_max_ps(mx,
                           _mm512_and_ps(_mm512_maskz_loadu_ps(Mask16(k1 - k), xr + k), abs_mask));
      }
      const float amax = _mm512_reduce_max_ps(mx);
      const bool nonzero = amax >= kQ8MinActivationAmax;
      const __m512 inv = _mm512_set1_ps(nonzero ? 127.0f / amax : 0.0f);
      __m512i total = _mm512_setzero_si512();
      for (int64_t k = k0; k < k1; k += 16) {
        const __mmask16 m = Mask16(k1 - k);
        // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint; masked-off
        // lanes load 0 and add 0 to the sum.
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + k), inv));
        q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
        total = _mm512_add_epi32(total, q);
        _mm512_mask_cvtepi32_storeu_epi8(qr + k, m, q);
      }
      a->scales[size_t(r * nb + b)] = nonzero ? amax / 127.0f : 0.0f;
      a->zero_terms[size_t(r * nb + b)] = -kQ8WeightFlip * _mm512_reduce_add_epi32(total);
    }
  }
}

// One Q8 product: x[M, K] (quantized, row-major) times interleaved weights.
struct Q8Problem {
  const int8_t* xq;      // [M, K] + slack
  const float* xs;       // [M, nb]
  const int32_t* xzero;  // [M, nb]: −128 · Σ qx
  int64_t M, K, nb, steps;
  const int8_t* wq;    // [groups, steps, 16, 4]
  const uint16_t* ws;  // [groups, nb, 16], F16
  int64_t N;
  float* y;
};

inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc + w · x (vpdpbusd, w unsigned). The empty asm pins the result to a register: without it
// GCC 12 moves every accumulator between two registers each step and spills some, halving the
// speed.
inline __m512i Dpbusd(__m512i acc, __m512i w, __m512i x) {
  __m512i r = _mm512_dpbusd_epi32(acc, w, x);
  asm("" : "+v"(r));
  return r;
}

// One 4-column step of a tile: acc[i][j] += x[i, 4 s .. 4 s + 4] · (w + 128)[group g0 + j, same
// columns]. `xmask` keeps the activation bytes of columns < K: past the last column the weights
// are 0, so 128 once flipped, and the bytes there (the next row's, or the slack) must not count.
template <int MR, int NG, bool kPrefetch>
inline void Step(const int8_t* wg, int64_t wstride, int64_t ahead, const int8_t* xm, int64_t K,
                 int64_t s, __m512i (&acc)[MR][NG], int32_t xmask = -1) {
  __m512i wv[NG];
#pragma GCC unroll 4
  for (int j = 0; j < NG; ++j) {
    const int8_t* wp = wg + j * wstride + s * 64;
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(wp) + ahead, _MM_HINT_T0);
    wv[j] = _mm512_xor_si512(_mm512_loadu_si512(wp), _mm512_set1_epi8(-128));  // qw + 128, u8
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    const __m512i xv = _mm512_and_si512(Broadcast4(xm + i * K + 4 * s), _mm512_set1_epi32(xmask));
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) acc[i][j] = Dpbusd(acc[i][j], wv[j], xv);
  }
}

// Outputs y[m0 .. m0+MR, 16 g0 .. 16 (g0+NG)] restricted to columns [n0, n1). Per block, the
// int32 sums of row i start at −128 · Σ qx[i] (the zero point of the u8 weights, so the block's
// exact dot product is complete after its steps), then the block's 8 steps (kQ8Block / 4) run with
// a constant trip count, and one convert, one multiply by sx and one fma with sw per
// accumulator add it to the f32 sums, which stay in registers (MR · NG ≤ 12).
template <int MR, int NG, tiles::Prefetch kPf>
void Tile(const Q8Problem& p, int64_t m0, int64_t g0, int64_t n0, int64_t n1,
          const tiles::ChunkPrefetch& pf = {}) {
  constexpr bool kPrefetch = kPf == tiles::Prefetch::kTileAhead;
  static_assert(MR * NG <= 12, "int32 and f32 accumulators must fit in the 32 registers");
  constexpr int64_t kBlockSteps = kQ8Block / 4;
  const int64_t K = p.K, nb = p.nb, steps = p.steps;
  const int8_t* wg = p.wq + g0 * steps * 64;
  const int64_t wstride = steps * 64;  // bytes between groups
  const int8_t* xm = p.xq + m0 * K;
  // Several groups prefetch the same column quad one tile (NG groups) ahead: the groups are
  // contiguous, so this streams the matrix one tile ahead of the loads. A single group
  // (decode) prefetches 32 quads (2 KiB) ahead in its own stream, running into the next group
  // near its end (ADR 0021: one near-prefetched stream per thread is faster on Zen 4); a single
  // group of 7 rows or more, whose line takes 7-10 vpdpbusd, 8 KiB ahead (ADR 0038: at 2 KiB
  // its prefetches arrived late).
  const int64_t ahead = NG == 1 ? (MR >= 7 ? 8192 : 2048) : NG * wstride;
  const int64_t next_ahead = pf.chunk * wstride;
  // The bytes of the last step's columns below K (little-endian: column 4 s + c is byte c).
  const int32_t last_mask = K % 4 == 0 ? -1 : static_cast<int32_t>((1u << (8 * (K % 4))) - 1u);
  __m512 facc[MR][NG];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) facc[i][j] = _mm512_setzero_ps();
  }
  int64_t pf_count = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s0 = b * kBlockSteps, s1 = std::min(steps, s0 + kBlockSteps);
    // kNextChunk: this block's codes and scales in the next chunk's groups, the codes one line
    // per step (tiles::ChunkPrefetch).
    bool next_chunk = false;
    if constexpr (kPf == tiles::Prefetch::kNextChunk) {
      next_chunk = pf_count == pf.phase;
      if (++pf_count == pf.every) pf_count = 0;
      if (next_chunk) {
#pragma GCC unroll 4
        for (int j = 0; j < NG; ++j) {
          _mm_prefetch(reinterpret_cast<const char*>(p.ws + ((g0 + j + pf.chunk) * nb + b) * 16),
                       _MM_HINT_T0);
        }
      }
    }
    __m512i acc[MR][NG];
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      // A broadcast from memory: computing −128 · Σ qx here (a load, two integer operations
      // and a broadcast from a general register per row) made the prefill tiles 4-6% slower.
      const __m512i zp = _mm512_set1_epi32(p.xzero[(m0 + i) * nb + b]);
#pragma GCC unroll 4
      for (int j = 0; j < NG; ++j) acc[i][j] = zp;
    }
    if (s1 - s0 == kBlockSteps && (b + 1 < nb || K % 4 == 0)) {
      if (next_chunk) {
#pragma GCC unroll 12
        for (int64_t t = 0; t < kBlockSteps; ++t) {
          Step<MR, NG, true>(wg, wstride, next_ahead, xm, K, s0 + t, acc);
        }
      } else {
#pragma GCC unroll 12
        for (int64_t t = 0; t < kBlockSteps; ++t) {
          Step<MR, NG, kPrefetch>(wg, wstride, ahead, xm, K, s0 + t, acc);
        }
      }
    } else {  // the row's last block, short or ending inside a 4-column step
      for (int64_t s = s0; s + 1 < s1; ++s) {
        Step<MR, NG, kPrefetch>(wg, wstride, ahead, xm, K, s, acc);
      }
      Step<MR, NG, kPrefetch>(wg, wstride, ahead, xm, K, s1 - 1, acc, last_mask);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NG; ++j) {
      const __m512 sw = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.ws + ((g0 + j) * nb + b) * 16)));
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512 t =
            _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][j]), _mm512_set1_ps(p.xs[(m0 + i) * nb + b]));
        facc[i][j] = _mm512_fmadd_ps(t, sw, facc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NG; ++j) {
    const int64_t nbase = (g0 + j) * 16;
    const int64_t lo = std::max(n0, nbase) - nbase, hi = std::min(n1, nbase + 16) - nbase;
    const __mmask16 mask = static_cast<__mmask16>(Mask16(hi) & ~Mask16(lo));
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i)
      _mm512_mask_storeu_ps(p.y + (m0 + i) * p.N + nbase, mask, facc[i][j]);
  }
}

// Tiles of at most MR rows × NG groups (the last one smaller) over groups [g0, g1), walked in
// chunks of kChunk groups that stay in L2 while every row tile passes; the row tiles have
// balanced heights (tiles::ForEachBalancedRowTile: a prompt gives each expert about 32 rows,
// ADR 0027). With three row tiles or more the later passes prefetch the next chunk
// (tiles::ChunkPrefetch); with fewer, kPrefetch streams each tile one tile ahead.
template <int MR, int NG, bool kPrefetch>
struct Tiling {
  static constexpr int64_t kChunk = 8;
  static constexpr tiles::Prefetch kAhead =
      kPrefetch ? tiles::Prefetch::kTileAhead : tiles::Prefetch::kNone;

  template <int R, tiles::Prefetch kPf>
  static void Rows(const Q8Problem& p, int64_t m0, int64_t g, int64_t ng, int64_t n0, int64_t n1,
                   const tiles::ChunkPrefetch& pf) {
    if (ng == NG) {
      Tile<R, NG, kPf>(p, m0, g, n0, n1, pf);
    } else {
      for (int64_t k = 0; k < ng; ++k) Tile<R, 1, kPf>(p, m0, g + k, n0, n1, pf);
    }
  }

  static void Run(const Q8Problem& p, int64_t n0, int64_t n1) {
    const int64_t g0 = n0 / 16, g1 = (n1 + 15) / 16;
    // One row tile's pass over a chunk, its tiles taking the pass's prefetch.
    const auto pass = [&](int64_t m0, int64_t mr, int64_t gc, int64_t ge,
                          const tiles::ChunkPrefetch& pf, auto kind) {
      for (int64_t g = gc; g < ge; g += NG) {
        const int64_t ng = std::min<int64_t>(NG, ge - g);
        tiles::DispatchHeight<MR>(mr, [&](auto r) {
          Rows<decltype(r)::value, decltype(kind)::value>(p, m0, g, ng, n0, n1, pf);
        });
      }
    };
    tiles::ForEachChunkPass<MR, kAhead>(p.M, g0, g1, kChunk, pass);
  }
};

// The product with DG groups per decode tile (DG weight streams per thread at M ≤ 3).
template <int DG>
void MatMulQ8VnniStreams(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                         float* y) {
  const Q8Problem p{x.q.data(),
                    x.scales.data(),
                    x.zero_terms.data(),
                    x.rows,
                    x.cols,
                    x.blocks,
                    Q8Steps(x.cols),
                    static_cast<const int8_t*>(w.data),
                    w.scales,
                    w.rows,
                    y};
  // Decode (M ≤ 3): tiles of all M rows × DG groups (DG weight streams). 7-10 rows (8 slots'
  // projections; a prompt of about 128 tokens gives each expert about 8 rows): one tile of all
  // rows × 1 group, one pass reading each weight line once (ADR 0038: 11-25% faster at 8 rows
  // than two passes of 4 × 2 tiles; 6% at 10; at 12 slower). Else tiles of 6 rows × 2 groups, in
  // chunks that stay in L2 while every row tile passes.
  if (p.M <= 3) {
    switch (p.M) {
      case 1: return Tiling<1, DG, true>::Run(p, n0, n1);
      case 2: return Tiling<2, DG, true>::Run(p, n0, n1);
      default: return Tiling<3, DG, true>::Run(p, n0, n1);
    }
  }
  if (p.M >= 7 && p.M <= 10) return Tiling<10, 1, true>::Run(p, n0, n1);
  if (p.M <= 16) return Tiling<6, 2, true>::Run(p, n0, n1);
  Tiling<6, 2, false>::Run(p, n0, n1);
}

void MatMulQ8Vnni(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  MatMulQ8VnniStreams<1>(x, w, n0, n1, y);
}

void MatMulQ8VnniFourStreams(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                             float* y) {
  MatMulQ8VnniStreams<4>(x, w, n0, n1, y);
}

}  // namespace

// For AVX512-VNNI CPUs without AVX512_BF16 (Ice Lake, Cascade Lake): the "avx512" variant with
// these Q8 kernels.
const KernelVariant* Avx512VnniVariant() {
  static const KernelVariant v = [] {
    KernelVariant k = *Avx512Variant();
    k.name = "avx512vnni";
    k.quantize_q8 = QuantizeQ8Vnni;
    k.matmul_q8 = MatMulQ8Vnni;
    k.matmul_q8_four_streams = MatMulQ8VnniFourStreams;
    k.q4 = Avx512VnniQ4Kernels();
    return k;
  }();
  return &v;
}

}  // namespace vls::kernels
