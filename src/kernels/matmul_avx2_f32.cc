// The dense matmuls of the "avx2" variant: f32 activations against F32/BF16/F16 weights
// (matmul_f32) and BF16 activations against BF16 weights (matmul_bf16), both widened to f32 in
// registers and multiplied with FMA into f32 sums. A BF16 value is the top half of its f32, so
// a product of two BF16 values is exact in f32: matmul_bf16 differs from the reference only in
// the order of the f32 sums, as the contract allows. The BF16 blocked kernel is in
// matmul_avx2_bf16.cc. Compiled with -mavx2 -mfma -mf16c; only called after the CPU check.
//
// y[M, n0:n1] is computed in register tiles of MR activation rows × NR weight rows, each a dot
// product over the full K in MR·NR 8-lane accumulators, summed across lanes at the end. With 16
// ymm registers a 4 × 3 tile holds 12 accumulators, 3 widened weight vectors and one activation
// vector. Weight rows are walked in chunks of kNChunk so a chunk stays in L2 while every row
// block of x passes over it (each weight byte comes from memory once per call, whatever M is).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx2_internal.h"
#include "kernels/matmul_avx2_bf16.h"

namespace vls::kernels::avx2_internal {

namespace {

constexpr int kMr = 4;
constexpr int kNr = 3;
constexpr int64_t kNChunk = 24;  // weight rows: 96 KiB of BF16 at K 2048, a multiple of kNr

// 8 × 16-bit values at p, the first `count` of them (the rest 0). count in [0, 8].
inline __m128i LoadU16(const uint16_t* p, int64_t count) {
  if (count >= 8) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  alignas(16) uint16_t tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(count) * sizeof(uint16_t));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
}

inline __m256 Bf16ToF32(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 8 values of a row of type T (float, or 16-bit of dtype D) widened to f32, starting at element
// i; only the first `count` are read (the rest 0) when kTail.
template <typename T, DType D, bool kTail>
inline __m256 Load8(const T* base, int64_t i, int64_t count) {
  if constexpr (D == DType::kF32) {
    if constexpr (kTail) {
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
      return _mm256_maskload_ps(base + i, mask);
    } else {
      return _mm256_loadu_ps(base + i);
    }
  } else {
    const __m128i h = LoadU16(base + i, kTail ? count : 8);
    if constexpr (D == DType::kBF16) {
      return Bf16ToF32(h);
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// X: the activations' element type and dtype (f32 for matmul_f32, BF16 for matmul_bf16);
// W: the weights' element type and dtype. kPrefetch: for few rows (decode), when the
// weights' bandwidth bounds the product.
template <typename XT, DType XD, typename WT, DType WD, bool kPrefetch>
struct DenseTile {
  const XT* x;  // [M, K]
  int64_t K;
  const WT* w;  // [N, K]
  int64_t N;
  float* y;  // [M, N]

  // Accumulates columns [k, k + 8) (only `count` of them when kTail) into acc.
  template <int MR, int NR, bool kTail>
  static void Step(const XT* xm, const WT* wn, int64_t K, int64_t k, int64_t count,
                   __m256 (&acc)[MR][NR]) {
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      if constexpr (kPrefetch && !kTail) {
        // Decode is bandwidth-bound and rows are only a few KiB, too short for the hardware
        // prefetcher to ramp up: fetch the same position of the row one tile (NR rows) ahead.
        _mm_prefetch(reinterpret_cast<const char*>(wn + (NR + j) * K + k), _MM_HINT_T0);
      }
      wv[j] = Load8<WT, WD, kTail>(wn + j * K, k, count);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = Load8<XT, XD, kTail>(xm + i * K, k, count);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }

  template <int MR, int NR>
  void Run(int64_t m, int64_t n) const {
    __m256 acc[MR][NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    }
    const XT* xm = x + m * K;
    const WT* wn = w + n * K;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) Step<MR, NR, false>(xm, wn, K, k, 8, acc);
    if (k < K) Step<MR, NR, true>(xm, wn, K, k, K - k, acc);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) y[(m + i) * N + n + j] = HorizontalSum(acc[i][j]);
    }
  }

  // Runtime (mr, nr) in [1, kMr] × [1, kNr] to a compile-time Run<MR, NR>.
  template <int MR = 1>
  void Dispatch(int mr, int nr, int64_t m, int64_t n) const {
    if constexpr (MR <= kMr) {
      if (mr != MR) return Dispatch<MR + 1>(mr, nr, m, n);
      switch (nr) {
        case 1: return Run<MR, 1>(m, n);
        case 2: return Run<MR, 2>(m, n);
        default: return Run<MR, 3>(m, n);
      }
    }
  }

  void ForEachTile(int64_t M, int64_t n0, int64_t n1) const {
    for (int64_t nc = n0; nc < n1; nc += kNChunk) {
      const int64_t ne = std::min(n1, nc + kNChunk);
      for (int64_t m = 0; m < M; m += kMr) {
        const auto mr = static_cast<int>(std::min<int64_t>(kMr, M - m));
        for (int64_t n = nc; n < ne; n += kNr) {
          Dispatch(mr, static_cast<int>(std::min<int64_t>(kNr, ne - n)), m, n);
        }
      }
    }
  }
};

static_assert(kNr == 3, "DenseTile::Dispatch switches over nr in [1, 3]");

// Measured at K 2048, N 6144 on one Zen 3 core: the prefetches take decode (M 1) from 10 to 14
// GB/s of BF16 weights, and slow prefill (M 512) down.
constexpr int64_t kPrefetchMaxRows = 8;

template <typename XT, DType XD, typename WT, DType WD>
void Dense(const XT* x, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const auto* wd = static_cast<const WT*>(w.data);
  if (M <= kPrefetchMaxRows) {
    DenseTile<XT, XD, WT, WD, true>{x, K, wd, w.rows, y}.ForEachTile(M, n0, n1);
  } else {
    DenseTile<XT, XD, WT, WD, false>{x, K, wd, w.rows, y}.ForEachTile(M, n0, n1);
  }
}

void MatMulF32(const float* x, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
               float* y) {
  switch (w.dtype) {
    case DType::kF32: return Dense<float, DType::kF32, float, DType::kF32>(x, M, K, w, n0, n1, y);
    case DType::kBF16:
      return Dense<float, DType::kF32, uint16_t, DType::kBF16>(x, M, K, w, n0, n1, y);
    case DType::kF16:
      return Dense<float, DType::kF32, uint16_t, DType::kF16>(x, M, K, w, n0, n1, y);
    case DType::kI32:
    case DType::kF8E4M3: break;
  }
  ReferenceVariant().matmul_f32(x, M, K, w, n0, n1, y);  // unreachable for bound weights
}

void MatMulBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
                float* y) {
  Dense<uint16_t, DType::kBF16, uint16_t, DType::kBF16>(xb, M, K, w, n0, n1, y);
}

}  // namespace

void AddMatMulKernels(KernelVariant* v) {
  v->matmul_f32 = MatMulF32;
  v->matmul_bf16 = MatMulBf16;
  v->matmul_bf16_blocked = MatMulBf16Blocked;
}

}  // namespace vls::kernels::avx2_internal
