// The Q8 kernels of the "avx2" variant: the design of matmul_avx512_vnni.cc on 256-bit vectors,
// without vpdpbusd. Every result equals the reference's bit for bit: block dot products are
// exact integers, and per (m, n) the f32 combination is the reference's fma(dot_b · sx, sw, acc)
// in block order.
//
// The products. vpmaddubsw (u8 × s8, pairs summed to int16 with saturation) of both operands
// signed (±127) needs one unsigned: the weights' signs move onto the activations,
// |qw| · (qx · sgn qw) = qx · qw, with |qw| as the unsigned operand; a pair is at most
// 127 · 127 · 2 = 32258, exact in int16. vpmaddwd by 1 widens the pairs to int32 sums of 4
// products, as one vpdpbusd lane. The sum is the reference's Σ qx · qw directly (the
// activations' zero terms, which the AVX512-VNNI kernel needs for its u8 weights, are not read).
//
// The weights are interleaved (quant.h): one 64-byte vector holds 4 columns of 16 weight rows,
// so its 32-byte halves are 4 columns of 8 rows, and the 4 activation bytes of one row (a
// broadcast dword) multiply each half into 8 outputs: no horizontal sums. A register tile is MR
// activation rows × NG groups of 16 weight rows (2 · NG halves): MR · 2 · NG int32 accumulators
// per block, |w| of one step, one broadcast and one temporary (16 registers; the f32 sums live in
// a stack tile, one load and store per vector and block of 8 steps). Decode takes 1 row × 2
// groups, 2 × 2 or 3 × 1; batched decode and prefill 4 × 1 (the ports of vpmaddubsw and
// vpmaddwd are the limit there: about 17 multiply-adds per cycle and core, 95% of what a loop
// of these four instructions alone reaches on Zen 3).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/avx2_internal.h"
#include "kernels/avx2_math.h"
#include "kernels/quant.h"

namespace vls::kernels::avx2_internal {

namespace {

// One whole block of kQ8Block values. Returns the block's scale; *zero_term is −kQ8WeightFlip ·
// Σ q.
inline float QuantizeFullBlock(const float* x, int8_t* q, int32_t* zero_term) {
  static_assert(kQ8Block == 32, "one block is 4 vectors of 8");
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  __m256 mx = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    mx = _mm256_max_ps(mx, _mm256_and_ps(v[i], abs_mask));
  }
  const float amax = ReduceMax(mx);
  const bool nonzero = amax >= kQ8MinActivationAmax;
  const __m256 inv = _mm256_set1_ps(nonzero ? 127.0f / amax : 0.0f);
  __m256i qi[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint.
    qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
  }
  // The saturating packs interleave 128-bit lanes: bytes come out as dwords 0 4 1 5 2 6 3 7 of
  // the natural order. Their upper clamp is the reference's +127; the max is its −127.
  const __m256i w =
      _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
  __m256i b = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  b = _mm256_max_epi8(b, _mm256_set1_epi8(-127));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
  // Σ q of the stored (clamped) bytes: vpsadbw of q + 128 against 0 sums 8 bytes per qword.
  const __m256i sad =
      _mm256_sad_epu8(_mm256_xor_si256(b, _mm256_set1_epi8(-128)), _mm256_setzero_si256());
  *zero_term = -kQ8WeightFlip * (ReduceAdd(sad) - 128 * kQ8Block);
  return nonzero ? amax / 127.0f : 0.0f;
}

// The short last block of a row (cols % kQ8Block != 0): the reference's operations.
float QuantizeShortBlock(const float* x, int64_t n, int8_t* q, int32_t* zero_term) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
  const bool nonzero = amax >= kQ8MinActivationAmax;
  const float inv = nonzero ? 127.0f / amax : 0.0f;
  int32_t sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    const auto v = static_cast<int32_t>(std::clamp(std::nearbyint(x[k] * inv), -127.0f, 127.0f));
    q[k] = static_cast<int8_t>(v);
    sum += v;
  }
  *zero_term = -kQ8WeightFlip * sum;
  return nonzero ? amax / 127.0f : 0.0f;
}

void QuantizeQ8Avx2(const float* x, int64_t r0, int64_t r1, Q8Activations* a) {
  const int64_t K = a->cols, nb = a->blocks;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * K;
    int8_t* qr = a->q.data() + r * K;
    float* sr = a->scales.data() + r * nb;
    int32_t* qs = a->zero_terms.data() + r * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kQ8Block, n = std::min(K - k0, kQ8Block);
      sr[b] = n == kQ8Block ? QuantizeFullBlock(xr + k0, qr + k0, qs + b)
                            : QuantizeShortBlock(xr + k0, n, qr + k0, qs + b);
    }
  }
}

// One Q8 product: x[M, K] (quantized, row-major) times interleaved weights.
struct Q8Problem {
  const int8_t* xq;  // [M, K] + slack
  const float* xs;   // [M, nb]
  int64_t M, K, nb, steps;
  const int8_t* wq;    // [groups, steps, 16, 4]
  const uint16_t* ws;  // [groups, nb, 16], F16
  int64_t N;
  float* y;
};

// The 4 activation bytes of one step in every dword, loaded from memory (the asm): GCC
// otherwise keeps a block's activations in registers, extracts each step's dword with shifts and
// spills accumulators to make room.
inline __m256i Broadcast4(const int8_t* p) {
  __m256i v;
  asm("vpbroadcastd %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const int32_t*>(p)));
  return v;
}

// acc + Σ over each dword's 4 bytes of x · w, for x in ±127 (or any x where w is 0) and w in
// ±127 (see the top of the file), with abs_w = |w| and w read from memory. One asm block: with
// intrinsics GCC 12 keeps every weight vector in a register, runs out of the 16 and shuffles
// and spills accumulators (a third slower at 4 rows).
inline __m256i DotAdd(__m256i acc, __m256i x, const int8_t* w, __m256i abs_w, __m256i ones) {
  __m256i t;
  asm("vpsignb %[w], %[x], %[t]\n\t"      // t = x · sgn(w), in ±127
      "vpmaddubsw %[t], %[aw], %[t]\n\t"  // |w| (u8) · t (s8), pairs in int16: exact
      "vpmaddwd %[ones], %[t], %[t]\n\t"  // pairs of pairs in int32
      "vpaddd %[t], %[acc], %[acc]"
      : [acc] "+x"(acc), [t] "=&x"(t)
      :
      [x] "x"(x), [w] "m"(*reinterpret_cast<const __m256i*>(w)), [aw] "x"(abs_w), [ones] "x"(ones));
  return acc;
}

// One 4-column step of a tile: acc[i][h] += x[i, 4 s .. 4 s + 4] · w[half h, same columns],
// half h being rows 8 (h % 2) .. 8 (h % 2) + 8 of group g0 + h / 2. xb[i] points at row i's s8
// activations of the step's block; t is the step within it.
template <int MR, int NG>
inline void Step(const int8_t* wg, int64_t wstride, const int8_t* const (&xb)[MR], int64_t s,
                 int64_t t, __m256i (&acc)[MR][2 * NG]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* wp[2 * NG];
  __m256i aw[2 * NG];
#pragma GCC unroll 8
  for (int h = 0; h < 2 * NG; ++h) {
    wp[h] = wg + (h / 2) * wstride + s * 64 + (h % 2) * 32;
    aw[h] = _mm256_abs_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[h])));
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m256i xv = Broadcast4(xb[i] + 4 * t);
#pragma GCC unroll 8
    for (int h = 0; h < 2 * NG; ++h) acc[i][h] = DotAdd(acc[i][h], xv, wp[h], aw[h], ones);
  }
}

// Outputs y[m0 .. m0+MR, 16 g0 .. 16 (g0+NG)] restricted to columns [n0, n1). Per block, the
// block's steps (8 = kQ8Block / 4, a constant trip count but for a short last block) sum into
// int32, then one convert, one multiply by sx and one fma with sw per vector add them to the f32
// sums.
template <int MR, int NG>
void Tile(const Q8Problem& p, int64_t m0, int64_t g0, int64_t n0, int64_t n1) {
  constexpr int H = 2 * NG;
  static_assert(MR * H <= 12, "the int32 accumulators and one step's operands fit 16 registers");
  constexpr int64_t kBlockSteps = kQ8Block / 4;
  const int64_t K = p.K, nb = p.nb, steps = p.steps;
  const int64_t wstride = steps * 64;  // bytes between groups
  const int8_t* wg = p.wq + g0 * wstride;
  const int8_t* xm = p.xq + m0 * K;
  alignas(32) float facc[MR][H][8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s0 = b * kBlockSteps, s1 = std::min(steps, s0 + kBlockSteps);
    __m256i acc[MR][H];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[i][h] = _mm256_setzero_si256();
    }
    // The block's activations of each row. A short last block's last step may read past its
    // row: the next row, or the slack after the last (the weights there are 0).
    const int8_t* xb[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xb[i] = xm + i * K + b * kQ8Block;
    if (s1 - s0 == kBlockSteps) {
#pragma GCC unroll 8
      for (int64_t t = 0; t < kBlockSteps; ++t) {
        Step<MR, NG>(wg, wstride, xb, s0 + t, t, acc);
      }
    } else {
      for (int64_t s = s0; s < s1; ++s) Step<MR, NG>(wg, wstride, xb, s, s - s0, acc);
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const __m256 sw = _mm256_cvtph_ps(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(p.ws + ((g0 + h / 2) * nb + b) * 16 + (h % 2) * 8)));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 t =
            _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_set1_ps(p.xs[(m0 + i) * nb + b]));
        _mm256_store_ps(facc[i][h], _mm256_fmadd_ps(t, sw, _mm256_load_ps(facc[i][h])));
      }
    }
    // Keeps the f32 sums in memory: GCC would otherwise hold them in registers through the
    // steps and spill int32 accumulators instead.
    asm volatile("" : : "r"(&facc[0][0][0]) : "memory");
  }
  for (int j = 0; j < NG; ++j) {
    const int64_t nbase = (g0 + j) * 16;
    const int64_t lo = std::max(n0, nbase), hi = std::min(n1, nbase + 16);
    for (int i = 0; i < MR; ++i) {
      float* yr = p.y + (m0 + i) * p.N;
      if (lo == nbase && hi == nbase + 16) {
        _mm256_storeu_ps(yr + nbase, _mm256_load_ps(facc[i][2 * j]));
        _mm256_storeu_ps(yr + nbase + 8, _mm256_load_ps(facc[i][2 * j + 1]));
      } else {
        for (int64_t n = lo; n < hi; ++n) yr[n] = facc[i][2 * j + (n - nbase) / 8][(n - nbase) % 8];
      }
    }
  }
}

// Tiles of MR rows (the last one smaller) × NG groups (the last one smaller) over the groups of
// columns [n0, n1), walked in chunks of 256 KB of weights (half of Zen 3's L2) that stay in L2
// while every row tile passes over them.
template <int MR, int NG>
struct Tiling {
  template <int R>
  static void Rows(const Q8Problem& p, int64_t m0, int64_t g, int64_t ng, int64_t n0, int64_t n1) {
    if (ng == NG) {
      Tile<R, NG>(p, m0, g, n0, n1);
    } else {
      for (int64_t k = 0; k < ng; ++k) Tile<R, 1>(p, m0, g + k, n0, n1);
    }
  }

  // The last mr < MR rows, as tiles of R, R - 1, ... rows.
  template <int R>
  static void Remainder(const Q8Problem& p, int64_t mr, int64_t m0, int64_t g, int64_t ng,
                        int64_t n0, int64_t n1) {
    if constexpr (R >= 1) {
      if (mr >= R) {
        Rows<R>(p, m0, g, ng, n0, n1);
        m0 += R;
        mr -= R;
      }
      Remainder<R - 1>(p, mr, m0, g, ng, n0, n1);
    }
  }

  static void Run(const Q8Problem& p, int64_t n0, int64_t n1) {
    const int64_t g0 = n0 / 16, g1 = (n1 + 15) / 16;
    const int64_t kChunk = std::max<int64_t>(NG, (256 << 10) / (p.steps * 64));
    for (int64_t gc = g0; gc < g1; gc += kChunk) {
      const int64_t ge = std::min(g1, gc + kChunk);
      for (int64_t m0 = 0; m0 < p.M; m0 += MR) {
        const int64_t mr = std::min<int64_t>(MR, p.M - m0);
        for (int64_t g = gc; g < ge; g += NG) {
          const int64_t ng = std::min<int64_t>(NG, ge - g);
          if (mr == MR) {
            Rows<MR>(p, m0, g, ng, n0, n1);
          } else {
            Remainder<MR - 1>(p, mr, m0, g, ng, n0, n1);
          }
        }
      }
    }
  }
};

// Prefill and batched decode: 4 rows × 1 group (8 int32 accumulators; 5 rows measured the same,
// the multiply-add ports are the limit).
constexpr int kMr = 4;

void MatMulQ8Avx2(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const Q8Problem p{x.q.data(),
                    x.scales.data(),
                    x.rows,
                    x.cols,
                    x.blocks,
                    Q8Steps(x.cols),
                    static_cast<const int8_t*>(w.data),
                    w.scales,
                    w.rows,
                    y};
  switch (p.M) {
    case 1: return Tiling<1, 2>::Run(p, n0, n1);
    case 2: return Tiling<2, 2>::Run(p, n0, n1);
    case 3: return Tiling<3, 1>::Run(p, n0, n1);
    default: break;
  }
  Tiling<kMr, 1>::Run(p, n0, n1);
}

}  // namespace

void AddQ8Kernels(KernelVariant* v) {
  v->quantize_q8 = QuantizeQ8Avx2;
  v->matmul_q8 = MatMulQ8Avx2;
}

}  // namespace vls::kernels::avx2_internal
