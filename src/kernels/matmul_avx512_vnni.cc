// The Q8 kernels of the "avx512vnni" and "avx512bf16" variants: AVX512-VNNI vpdpbusd (u8
// activations × s8 weights, int32 sums of 4 products per lane). Compiled with -mavx512vnni; only
// called after the CPU check in dispatch.cc. Every result equals the reference's bit for bit: block
// dot products are exact integers, and per (m, n) the f32 combination is the reference's fma(dot_b
// · sx, sw, acc) in block order.
//
// Two kernels over the same row-major weights:
//  - rows (M < kPanelMinRows, decode): lanes along K; 16 weight rows per tile, their 16 int32
//    accumulators reduced to one vector per block (lane = weight row), so the scales apply as
//    vectors. Memory-bound; each load prefetches the same block one tile (16 rows) ahead,
//    which streams the contiguous rows ahead of the loads (0.6B int8 decode 50 -> 57 tok/s
//    against prefetching 512 B ahead within the row; neutral on the 2B shape).
//  - panel (prefill): lanes along M. Activations are interleaved 16 rows × 4 columns (q16), so
//    one vpdpbusd multiplies 4 weight bytes (broadcast) with 4 columns of 16 rows; no horizontal
//    reduction, and block scales apply per vector. Tiles of up to 3 × 16 rows × 4 weight rows.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/matmul_tiles.h"
#include "kernels/quant.h"

namespace vls::kernels {

namespace {

constexpr int64_t kPanelMinRows = 8;
constexpr int kMv = 3;  // panel tile: up to 3 groups of 16 activation rows

inline __mmask16 Mask16(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
}
inline __mmask64 Mask64(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : n <= 0 ? 0 : (__mmask64{1} << n) - 1u;
}

// r[j] = Σ lanes of a[j], for 16 vectors (unpack/add tree, 45 instructions).
inline __m512i Reduce16(const __m512i* a) {
  __m512i t[8], u[4];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    t[p] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * p], a[2 * p + 1]),
                            _mm512_unpackhi_epi32(a[2 * p], a[2 * p + 1]));
  }
#pragma GCC unroll 8
  for (int p = 0; p < 4; ++p) {
    u[p] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * p], t[2 * p + 1]),
                            _mm512_unpackhi_epi64(t[2 * p], t[2 * p + 1]));
  }
  // u[p]: 128-bit chunk c holds, for rows 4p..4p+3, the sums over chunk c of each row.
  const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88),
                                       _mm512_shuffle_i32x4(u[0], u[1], 0xdd));
  const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88),
                                       _mm512_shuffle_i32x4(u[2], u[3], 0xdd));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(s01, s23, 0x88),
                          _mm512_shuffle_i32x4(s01, s23, 0xdd));
}

void QuantizeQ8Vnni(const float* x, int64_t r0, int64_t r1, Q8Activations* a) {
  const int64_t K = a->cols, nb = a->blocks;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * K;
    uint8_t* qr = a->q.data() + r * K;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kQ8Block, k1 = std::min(K, k0 + kQ8Block);
      __m512 mx = _mm512_setzero_ps();
      for (int64_t k = k0; k < k1; k += 16) {
        mx = _mm512_max_ps(mx,
                           _mm512_and_ps(_mm512_maskz_loadu_ps(Mask16(k1 - k), xr + k), abs_mask));
      }
      const float amax = _mm512_reduce_max_ps(mx);
      const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      for (int64_t k = k0; k < k1; k += 16) {
        const __mmask16 m = Mask16(k1 - k);
        // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint.
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + k), inv));
        q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
        _mm512_mask_cvtepi32_storeu_epi8(qr + k, m, _mm512_add_epi32(q, _mm512_set1_epi32(128)));
      }
      a->scales[size_t(r * nb + b)] = amax / 127.0f;
    }
  }
}

// acc[j] = the int32 lane sums of x · w over one block for 16 weight rows K bytes apart; a
// partial tile (nr < 16) repeats its last row. One running pointer instead of 16 row pointers
// keeps the loop out of the stack.
template <bool kFull>
inline void BlockDots(const uint8_t* xk, const int8_t* wk, int64_t K, int64_t len, int nr,
                      bool prefetch, __m512i* acc) {
  const __mmask64 m0 = Mask64(len), m1 = Mask64(len - 64);
  const __m512i x0 = kFull ? _mm512_loadu_si512(xk) : _mm512_maskz_loadu_epi8(m0, xk);
  const __m512i x1 = kFull ? _mm512_loadu_si512(xk + 64) : _mm512_maskz_loadu_epi8(m1, xk + 64);
  const int8_t* p = wk;
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    if (prefetch) {
      // The same block of the row one tile (16 rows) ahead: rows are contiguous, so this
      // streams the matrix one tile ahead of the loads.
      _mm_prefetch(reinterpret_cast<const char*>(p + 16 * K), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + 16 * K) + 64, _MM_HINT_T0);
    }
    const __m512i w0 = kFull ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(m0, p);
    const __m512i w1 = kFull ? _mm512_loadu_si512(p + 64) : _mm512_maskz_loadu_epi8(m1, p + 64);
    acc[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), x0, w0), x1, w1);
    if (j + 1 < nr) p += K;
  }
}

void MatMulRows(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const int64_t M = x.rows, K = x.cols, N = w.rows, nb = x.blocks;
  const auto* wq = static_cast<const int8_t*>(w.data);
  for (int64_t n = n0; n < n1; n += 16) {
    const int nr = static_cast<int>(std::min<int64_t>(16, n1 - n));
    alignas(64) int32_t idx[16];
    for (int j = 0; j < 16; ++j) idx[j] = static_cast<int32_t>((n + std::min(j, nr - 1)) * nb);
    const __m512i idxv = _mm512_load_si512(idx);
    for (int64_t m = 0; m < M; ++m) {
      const uint8_t* xm = x.q.data() + m * K;
      __m512 facc = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k0 = b * kQ8Block, len = std::min(kQ8Block, K - k0);
        __m512i acc[16];
        if (len == kQ8Block) {
          BlockDots<true>(xm + k0, wq + n * K + k0, K, len, nr, m == 0, acc);
        } else {
          BlockDots<false>(xm + k0, wq + n * K + k0, K, len, nr, false, acc);
        }
        const __m512i vb = _mm512_add_epi32(idxv, _mm512_set1_epi32(static_cast<int32_t>(b)));
        const __m512i zero_point = _mm512_slli_epi32(_mm512_i32gather_epi32(vb, w.sums, 4), 7);
        const __m512i dot = _mm512_sub_epi32(Reduce16(acc), zero_point);
        const __m512 t =
            _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(x.scales[size_t(m * nb + b)]));
        facc = _mm512_fmadd_ps(t, _mm512_i32gather_ps(vb, w.scales, 4), facc);
      }
      _mm512_mask_storeu_ps(y + m * N + n, Mask16(nr), facc);
    }
  }
}

struct PanelTile {
  const uint8_t* q16;  // [groups, steps, 16, 4]
  const float* s16;    // [groups, nb, 16]
  int64_t M, K, steps, nb;
  const int8_t* w;
  const float* sw;
  const int32_t* sums;
  int64_t N;
  float* y;

  template <int NR>
  inline void LoadW(int64_t n, int64_t s, __m512i* wv) const {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      int32_t v;
      std::memcpy(&v, w + (n + j) * K + 4 * s, 4);
      wv[j] = _mm512_set1_epi32(v);
    }
  }

  template <int MV, int NR>
  inline void Step(int64_t g, int64_t s, const __m512i* wv, __m512i (*acc)[NR]) const {
#pragma GCC unroll 8
    for (int i = 0; i < MV; ++i) {
      const __m512i xv = _mm512_loadu_si512(q16 + ((g + i) * steps + s) * 64);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], xv, wv[j]);
    }
  }

  template <int MV, int NR>
  void Run(int64_t g, int64_t n) const {
    // The outputs are 16-byte pieces of rows N floats apart: fetch their lines for writing
    // now, so the stores after the K loop do not wait on cache misses.
    for (int64_t m = g * 16; m < std::min(M, (g + MV) * 16); ++m) {
      __builtin_prefetch(y + m * N + n, 1, 3);
    }
    __m512 facc[MV][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MV; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) facc[i][j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k1 = std::min(K, (b + 1) * kQ8Block);
      const int64_t s0 = b * (kQ8Block / 4), s_full = k1 / 4;
      __m512i acc[MV][NR];
#pragma GCC unroll 8
      for (int i = 0; i < MV; ++i) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_si512();
      }
      for (int64_t s = s0; s < s_full; ++s) {
        __m512i wv[NR];
        LoadW<NR>(n, s, wv);
        Step<MV, NR>(g, s, wv, acc);
      }
      if (4 * s_full < k1) {
        // The last 1-3 columns: masked so nothing past the row (or the buffer) is read; q16
        // holds 0 past K, so the unused lanes add nothing.
        const auto mask = static_cast<__mmask16>((1u << (k1 - 4 * s_full)) - 1u);
        __m512i wv[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
          wv[j] = _mm512_broadcastd_epi32(_mm_maskz_loadu_epi8(mask, w + (n + j) * K + 4 * s_full));
        }
        Step<MV, NR>(g, s_full, wv, acc);
      }
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const __m512i zero_point = _mm512_set1_epi32(sums[(n + j) * nb + b] * 128);
        const __m512 swv = _mm512_set1_ps(sw[(n + j) * nb + b]);
#pragma GCC unroll 8
        for (int i = 0; i < MV; ++i) {
          const __m512 sxv = _mm512_loadu_ps(s16 + ((g + i) * nb + b) * 16);
          const __m512 t =
              _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][j], zero_point)), sxv);
          facc[i][j] = _mm512_fmadd_ps(t, swv, facc[i][j]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MV; ++i) Store<NR>(g + i, n, facc[i]);
  }

  // Writes one 16-row group's [16, NR] outputs. For NR = 4 a 4×4 transpose per 128-bit chunk
  // gives each output row its 4 values as one 16-byte store.
  template <int NR>
  inline void Store(int64_t g, int64_t n, const __m512* f) const {
    const int64_t m0 = g * 16, rows = std::min<int64_t>(16, M - m0);
    alignas(64) float out[4][16];
    if constexpr (NR == 8) {
      Store<4>(g, n, f);
      Store<4>(g, n + 4, f + 4);
    } else if constexpr (NR == 4) {
      const __m512 lo01 = _mm512_unpacklo_ps(f[0], f[1]), hi01 = _mm512_unpackhi_ps(f[0], f[1]);
      const __m512 lo23 = _mm512_unpacklo_ps(f[2], f[3]), hi23 = _mm512_unpackhi_ps(f[2], f[3]);
      // out[r][4c .. 4c+3] = the 4 outputs of row 4c + r.
      _mm512_store_ps(out[0], _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(lo01),
                                                                  _mm512_castps_pd(lo23))));
      _mm512_store_ps(out[1], _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(lo01),
                                                                  _mm512_castps_pd(lo23))));
      _mm512_store_ps(out[2], _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(hi01),
                                                                  _mm512_castps_pd(hi23))));
      _mm512_store_ps(out[3], _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(hi01),
                                                                  _mm512_castps_pd(hi23))));
      for (int64_t l = 0; l < rows; ++l) {
        std::memcpy(y + (m0 + l) * N + n, &out[l % 4][(l / 4) * 4], 4 * sizeof(float));
      }
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) _mm512_store_ps(out[j], f[j]);
      for (int64_t l = 0; l < rows; ++l) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) y[(m0 + l) * N + n + j] = out[j][l];
      }
    }
  }

  template <int MV>
  void DispatchNr(int nr, int64_t g, int64_t n) const {
    switch (nr) {
      case 1: return Run<MV, 1>(g, n);
      case 2: return Run<MV, 2>(g, n);
      case 3: return Run<MV, 3>(g, n);
      default: return Run<MV, 4>(g, n);
    }
  }
};

void MatMulPanel(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const PanelTile tile{x.q16.data(),
                       x.scales16.data(),
                       x.rows,
                       x.cols,
                       (x.cols + 3) / 4,
                       x.blocks,
                       static_cast<const int8_t*>(w.data),
                       w.scales,
                       w.sums,
                       w.rows,
                       y};
  const int64_t groups = (x.rows + 15) / 16;
  // Weight rows in chunks that stay in L2 while every activation group passes over them.
  for (int64_t nc = n0; nc < n1; nc += tiles::kNChunk) {
    const int64_t ne = std::min(n1, nc + tiles::kNChunk);
    for (int64_t g = 0; g < groups; g += kMv) {
      const int64_t mv = std::min<int64_t>(kMv, groups - g);
      int64_t n = nc;
      // One group alone (small M) has too few accumulators at 4 weight rows to hide the dot
      // product latency: take 8.
      for (; mv == 1 && n + 8 <= ne; n += 8) tile.Run<1, 8>(g, n);
      for (; n < ne; n += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, ne - n));
        if (mv == 3) {
          tile.DispatchNr<3>(nr, g, n);
        } else if (mv == 2) {
          tile.DispatchNr<2>(nr, g, n);
        } else {
          tile.DispatchNr<1>(nr, g, n);
        }
      }
    }
  }
}

void QuantizeQ8Entry(const float* x, int64_t r0, int64_t r1, Q8Activations* a);
void MatMulQ8Entry(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y);

// For AVX512-VNNI CPUs without AVX512_BF16 (Ice Lake, Cascade Lake): the "avx512" f32 kernels
// with these Q8 kernels.
const KernelVariant kAvx512Vnni = {"avx512vnni",
                                   avx512_internal::MatMulF32,
                                   nullptr,
                                   avx512_internal::Dot,
                                   avx512_internal::Axpy,
                                   avx512_internal::Scores,
                                   avx512_internal::WeightedSum,
                                   QuantizeQ8Entry,
                                   MatMulQ8Entry,
                                   avx512_internal::Attention};

void QuantizeQ8Entry(const float* x, int64_t r0, int64_t r1, Q8Activations* a) {
  QuantizeQ8Vnni(x, r0, r1, a);
}
void MatMulQ8Entry(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  if (x.rows < kPanelMinRows) return MatMulRows(x, w, n0, n1, y);
  MatMulPanel(x, w, n0, n1, y);
}

}  // namespace

namespace avx512_internal {
void QuantizeQ8(const float* x, int64_t r0, int64_t r1, Q8Activations* a) {
  QuantizeQ8Entry(x, r0, r1, a);
}
void MatMulQ8(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  MatMulQ8Entry(x, w, n0, n1, y);
}
}  // namespace avx512_internal

const KernelVariant* Avx512VnniVariant() { return &kAvx512Vnni; }

}  // namespace vls::kernels
