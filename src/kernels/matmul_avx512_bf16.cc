// The "avx512bf16" variant: for Precision::kBF16, BF16 activations against BF16 weights with
// AVX512_BF16 pair dot products (vdpbf16ps) accumulating in f32; its f32 entries are the
// "avx512" variant's, its Q8 entries the AVX512-VNNI kernels of matmul_avx512_vnni.cc. Compiled
// with -mavx512bf16; only called after the CPU check.
#include <immintrin.h>

#include "kernels/amx.h"
#include "kernels/dispatch.h"
#include "kernels/matmul_tiles.h"

namespace vls::kernels {

namespace {

inline __m512bh LoadBh(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}
inline __m512bh LoadBhMasked(const uint16_t* p, __mmask32 mask) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

struct Bf16Tile {
  const uint16_t* x;
  int64_t K;
  const uint16_t* w;
  int64_t N;
  float* y;

  template <int MR, int NR>
  void Run(int64_t m, int64_t n) const {
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const uint16_t* xm = x + m * K;
    const uint16_t* wn = w + n * K;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      __m512bh wv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        // Decode is bandwidth-bound. Rows are contiguous, so prefetching the same position of
        // the row one tile (NR rows) ahead streams the matrix a tile ahead of the loads; rows
        // are only 2-12 KiB, too short for a within-row distance to ramp up. Measured: 2B BF16
        // decode 10.7 -> 13.4 tok/s, 0.6B 22 -> 33 (within-row distances of 128 B to 4 KiB
        // gave 9.8-10.7 on the 2B shape).
        _mm_prefetch(reinterpret_cast<const char*>(wn + (NR + j) * K + k), _MM_HINT_T0);
        wv[j] = LoadBh(wn + j * K + k);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m512bh xv = LoadBh(xm + i * K + k);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
      }
    }
    if (k < K) {
      // Lanes past K load as +0 in both operands, so they add nothing.
      const auto mask = static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1u);
      __m512bh wv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) wv[j] = LoadBhMasked(wn + j * K + k, mask);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m512bh xv = LoadBhMasked(xm + i * K + k, mask);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) y[(m + i) * N + n + j] = _mm512_reduce_add_ps(acc[i][j]);
    }
  }
  void Dispatch(int mr, int nr, int64_t m, int64_t n) const {
    tiles::DispatchMr(*this, mr, nr, m, n);
  }
};

void MatMulBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
                float* y) {
  const Bf16Tile tile{xb, K, static_cast<const uint16_t*>(w.data), w.rows, y};
  tiles::ForEachTile(M, n0, n1, tile);
}

}  // namespace

// "avx512vnni" with the AVX512-BF16 kernels for BF16 weights and for attention over a BF16
// cache.
const KernelVariant* Avx512Bf16Variant() {
  static const KernelVariant v = [] {
    KernelVariant k = *Avx512VnniVariant();
    k.name = "avx512bf16";
    k.matmul_bf16 = MatMulBf16;
    k.matmul_bf16_blocked = avx512_internal::MatMulBf16Blocked;
    k.attention = avx512_internal::AttentionBf16;
    k.attention_bf16_products = true;
    UseAmxTiles(&k);  // where the CPU and the OS give AMX tiles (ADR 0034)
    return k;
  }();
  return &v;
}

const KernelVariant* Avx512Bf16FmaVariant() {
  static const KernelVariant v = [] {
    KernelVariant k = *Avx512Bf16Variant();
    k.name = "avx512bf16-fma";
    k.matmul_bf16_blocked = Avx512VnniVariant()->matmul_bf16_blocked;
    k.onednn_blocked = false;
    return k;
  }();
  return &v;
}

}  // namespace vls::kernels
