// The Q4 kernels (kernels/q4.h) for the avx2 variant: the design of matmul_avx512_q4.cc on
// 256-bit vectors, without vpdpbusd. One 32-byte half of a block's 64-byte code vector holds
// 8 rows × 4 columns (low nibbles: columns 4v .. 4v+3, high nibbles: 16+4v .. 16+4v+3);
// vpmaddubsw of the unpacked u8 codes with 4 broadcast s8 activations gives, per row, two int16
// sums of 2 products, and vpmaddwd with ones adds them into the row's int32 dot product.
//
// Exactness: a code is <= 15 and an activation in [-128, 127], so one vpmaddubsw lane is at most
// 2 · 15 · 128 = 3840 in magnitude (no saturation), and the 8 of one 32-column group (4 vectors ×
// 2 nibbles) sum in int16 to at most 8 · 3840 = 30720 < 32767: the int16 accumulators stay exact
// over a whole group, and one vpmaddwd per group and 8 rows gives the exact int32 dot. Per
// (m, n) the f32 steps are the reference's: t = f32(dot) · d, t = fma(m, Σqx, t),
// acc = fma(t, s, acc) in group order. So every result equals the reference's bit for bit.
//
// Tiles of MR activation rows × NG groups of 16 weight rows, as the AVX-512 kernel, sized for 16
// ymm registers. Decode (M <= 3) takes all M rows × one row group per tile (2 M int16
// accumulators): each thread streams one row group after the next, one stream. On Zen 4 that ran
// the M = 1 LM head (K 1024, N 151936) 1.6-2.1x as fast on one and two threads as tiles of 4 row
// groups, whose 4 streams ran side by side (ADR 0021). M = 1 and 2 leave that stream to the
// hardware prefetcher: prefetching 8 blocks ahead in it ran the LM head no faster (up to 20%
// slower) and matrices in L3 up to 10% slower. M = 3 (one row group per tile before) keeps it.
// Batched decode and prefill take 4 rows × 1 row group (8 int16 accumulators, 2 code vectors,
// the broadcast and a product; 6 × 1, 8 × 1 and 2 × 2 measured no faster on Zen 3), the weights
// in chunks of row groups that stay in L2 while every row tile passes over them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx2_internal.h"
#include "kernels/quant.h"

namespace vls::kernels::avx2_internal {

namespace {

// One group of 32 values: the scale, Σq, and the s8 codes. No clamp: |x| <= amax, so
// |x · fl(127 / amax)| <= 127 · (1 + 2⁻²⁴) rounds to at most 127 (as the AVX-512 kernel).
void QuantizeQ4ActivationsAvx2(const float* x, int64_t r0, int64_t r1, const Q4Activations& a) {
  const int64_t K = a.cols, ng = a.groups;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // vpackssdw and vpacksswb work per 128-bit lane: this puts the 4-byte runs back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      const float* xg = x + r * K + g * kQ4Group;
      int8_t* qg = a.q + r * K + g * kQ4Group;
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xg + 8 * i);
      const __m256 m8 = _mm256_max_ps(
          _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
          _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      const float amax = _mm_cvtss_f32(m4);
      const bool nonzero = amax >= kQ8MinActivationAmax;
      const __m256 inv = _mm256_set1_ps(nonzero ? 127.0f / amax : 0.0f);
      // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint.
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
      const __m256i bytes =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qg),
                          _mm256_permutevar8x32_epi32(bytes, order));
      const __m256i s8 =
          _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      a.scales[r * ng + g] = nonzero ? amax / 127.0f : 0.0f;
      a.sums[r * ng + g] = static_cast<float>(_mm_cvtsi128_si32(s4));
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

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// acc + the products of the codes c (u8) and activations x (s8), summed in pairs, in int16. The
// empty asm pins the result to a register where it is computed: GCC 12 otherwise hoists all the
// vpmaddubsw of a group ahead of the adds and spills their results to the stack.
inline __m256i AddProducts(__m256i acc, __m256i c, __m256i x) {
  __m256i r = _mm256_add_epi16(acc, _mm256_maddubs_epi16(c, x));
  asm("" : "+x"(r));
  return r;
}

// Prefetching tiles prefetch this many bytes ahead in each row group's stream (the blocks of one
// row group are contiguous in group order). On Zen 3 distances of 0, 8 and 16 blocks run alike
// (the hardware prefetcher follows these streams); it is for CPUs whose prefetchers track fewer.
constexpr int64_t kPrefetchAhead = 8 * kQ4BlockBytes;

// Outputs y[m0 .. m0+MR, 16 G0 .. 16 (G0+NG)] restricted to columns [n0, n1). Half h of the tile
// is rows 8h .. 8h+7 of it: row group G0 + h/2, bytes 32 (h%2) .. of each code vector.
template <int MR, int NG, bool kPrefetch>
void Tile(const Q4Problem& p, int64_t m0, int64_t G0, int64_t n0, int64_t n1) {
  constexpr int NH = 2 * NG;
  const int64_t K = p.K, ng = p.ng;
  const int64_t gstride = ng * kQ4BlockBytes;  // bytes between row groups
  const uint8_t* wg = p.w + G0 * gstride;
  const int8_t* xm = p.xq + m0 * K;
  const __m256i nibble = _mm256_set1_epi8(15);
  const __m256i ones = _mm256_set1_epi16(1);
  // The f32 sums live in memory: they change once per group, the registers hold the int16 ones.
  alignas(32) float facc[MR][NH][8] = {};
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* blk = wg + g * kQ4BlockBytes;
    const int8_t* xg = xm + g * kQ4Group;
    __m256i acc[MR][NH];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) acc[i][h] = _mm256_setzero_si256();
    }
    // Step s: code vector s/2, low nibbles (s even: columns 4v ..) or high (columns 16+4v ..).
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const int v = s / 2, high = s % 2;
      if constexpr (kPrefetch) {
        if (high == 0) {
#pragma GCC unroll 4
          for (int j = 0; j < NG; ++j) {
            _mm_prefetch(reinterpret_cast<const char*>(blk + j * gstride + 64 * v + kPrefetchAhead),
                         _MM_HINT_T0);
          }
        }
      }
      __m256i c[NH];
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        const __m256i packed = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(blk + h / 2 * gstride + 64 * v + 32 * (h % 2)));
        c[h] = _mm256_and_si256(high ? _mm256_srli_epi16(packed, 4) : packed, nibble);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256i xb = Broadcast4(xg + i * K + 16 * high + 4 * v);
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) {
          acc[i][h] = AddProducts(acc[i][h], c[h], xb);
        }
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const uint8_t* sp = blk + h / 2 * gstride + kQ4ScalesOffset + 16 * (h % 2);
      if constexpr (kPrefetch) {
        if (h % 2 == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(sp + kPrefetchAhead), _MM_HINT_T0);
        }
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp)));
      const __m256 mn = _mm256_cvtph_ps(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(sp + (kQ4MinsOffset - kQ4ScalesOffset))));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256i dot = _mm256_madd_epi16(acc[i][h], ones);
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), d);
        t = _mm256_fmadd_ps(mn, _mm256_set1_ps(p.xsum[(m0 + i) * ng + g]), t);
        _mm256_store_ps(facc[i][h], _mm256_fmadd_ps(t, _mm256_set1_ps(p.xs[(m0 + i) * ng + g]),
                                                    _mm256_load_ps(facc[i][h])));
      }
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    const int64_t nbase = G0 * 16 + 8 * h;
    const int64_t lo = std::max(n0, nbase) - nbase, hi = std::min(n1, nbase + 8) - nbase;
    if (lo >= hi) continue;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      float* yp = p.y + (m0 + i) * p.N + nbase;
      if (lo == 0 && hi == 8) {
        _mm256_storeu_ps(yp, _mm256_load_ps(facc[i][h]));
      } else {
        std::copy(facc[i][h] + lo, facc[i][h] + hi, yp + lo);
      }
    }
  }
}

// Tiles of MR rows × NG row groups over row groups [G0, G1), walked in chunks of kChunk row groups
// that stay in L2 while every row tile passes over them. The last row tile of fewer than MR rows
// takes its own size, and the last tiles of fewer than NG row groups one row group each.
template <int MR, int NG, bool kPrefetch>
struct Tiling {
  static constexpr int64_t kChunk = 4;

  template <int R>
  static void Rows(const Q4Problem& p, int64_t m0, int64_t G, int64_t nrg, int64_t n0, int64_t n1) {
    if (nrg == NG) {
      Tile<R, NG, kPrefetch>(p, m0, G, n0, n1);
    } else {
      for (int64_t k = 0; k < nrg; ++k) Tile<R, 1, kPrefetch>(p, m0, G + k, n0, n1);
    }
  }

  template <int R>
  static void Remainder(const Q4Problem& p, int64_t mr, int64_t m0, int64_t G, int64_t nrg,
                        int64_t n0, int64_t n1) {
    if constexpr (R >= 1) {
      if (mr == R) return Rows<R>(p, m0, G, nrg, n0, n1);
      Remainder<R - 1>(p, mr, m0, G, nrg, n0, n1);
    }
  }

  static void Run(const Q4Problem& p, int64_t n0, int64_t n1) {
    const int64_t G0 = n0 / 16, G1 = (n1 + 15) / 16;
    for (int64_t gc = G0; gc < G1; gc += kChunk) {
      const int64_t ge = std::min(G1, gc + kChunk);
      for (int64_t m0 = 0; m0 < p.M; m0 += MR) {
        const int64_t mr = std::min<int64_t>(MR, p.M - m0);
        for (int64_t G = gc; G < ge; G += NG) {
          const int64_t nrg = std::min<int64_t>(NG, ge - G);
          if (mr == MR) {
            Rows<MR>(p, m0, G, nrg, n0, n1);
          } else {
            Remainder<MR - 1>(p, mr, m0, G, nrg, n0, n1);
          }
        }
      }
    }
  }
};

void MatMulQ4Avx2(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const Q4Problem p{
      x.q,    x.scales, x.sums, x.rows, x.cols, x.groups, static_cast<const uint8_t*>(w.data),
      w.rows, y};
  switch (p.M) {
    case 1: return Tiling<1, 1, false>::Run(p, n0, n1);
    case 2: return Tiling<2, 1, false>::Run(p, n0, n1);
    case 3: return Tiling<3, 1, true>::Run(p, n0, n1);
    default: break;
  }
  if (p.M <= 16) return Tiling<4, 1, true>::Run(p, n0, n1);
  Tiling<4, 1, false>::Run(p, n0, n1);
}

}  // namespace

const Q4Kernels* Q4KernelsAvx2() {
  static const Q4Kernels k = {"avx2", QuantizeQ4ActivationsAvx2, MatMulQ4Avx2, MatMulQ6Avx2};
  return &k;
}

}  // namespace vls::kernels::avx2_internal
