// The "avx512" variant: f32 activations, weights widened in registers from F32/BF16/F16,
// FMA with f32 accumulation. Compiled with AVX-512 flags (see CMakeLists.txt); only called
// after the CPU check in dispatch.cc.
#include <immintrin.h>

#include "kernels/dispatch.h"
#include "kernels/matmul_tiles.h"

namespace vls::kernels {

namespace {

template <DType D>
inline __m512 LoadW(const void* base, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

template <DType D>
inline __m512 LoadWMasked(const void* base, int64_t i, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(base) + i);
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

template <DType D>
struct F32Tile {
  const float* x;
  int64_t K;
  const void* w;
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
    const float* xm = x + m * K;
    const int64_t wn = n * K;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      __m512 wv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) wv[j] = LoadW<D>(w, wn + j * K + k);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m512 xv = _mm512_loadu_ps(xm + i * K + k);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
    if (k < K) {
      const auto mask = static_cast<__mmask16>((1u << (K - k)) - 1u);
      __m512 wv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) wv[j] = LoadWMasked<D>(w, wn + j * K + k, mask);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, xm + i * K + k);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
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

template <DType D>
void MatMulF32Typed(const float* x, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
                    float* y) {
  const F32Tile<D> tile{x, K, w.data, w.rows, y};
  tiles::ForEachTile(M, n0, n1, tile);
}

void MatMulF32(const float* x, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
               float* y) {
  switch (w.dtype) {
    case DType::kF32: return MatMulF32Typed<DType::kF32>(x, M, K, w, n0, n1, y);
    case DType::kBF16: return MatMulF32Typed<DType::kBF16>(x, M, K, w, n0, n1, y);
    case DType::kF16: return MatMulF32Typed<DType::kF16>(x, M, K, w, n0, n1, y);
    case DType::kI32:
    case DType::kF8E4M3: break;
  }
  ReferenceVariant().matmul_f32(x, M, K, w, n0, n1, y);  // unreachable for bound weights
}

float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const auto mask = static_cast<__mmask16>(n - i >= 16 ? 0xffffu : (1u << (n - i)) - 1u);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i),
                           acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void Scores(const float* q, const float* k, int64_t stride, int64_t T, int64_t D, float scale,
            float* out) {
  for (int64_t t = 0; t < T; ++t) out[t] = Dot(q, k + t * stride, D) * scale;
}

// Keeps up to 128 output values in registers across all T rows instead of a load/store of
// `out` per row (the attention P·V product was a sixth of prefill time as axpy calls).
void WeightedSum(const float* p, const float* v, int64_t stride, int64_t T, int64_t D, float* out) {
  constexpr int kVecs = 8;
  for (int64_t d0 = 0; d0 < D; d0 += 16 * kVecs) {
    __m512 acc[kVecs];
    __mmask16 mask[kVecs];
#pragma GCC unroll 8
    for (int j = 0; j < kVecs; ++j) {
      acc[j] = _mm512_setzero_ps();
      const int64_t left = D - d0 - 16 * j;
      mask[j] = static_cast<__mmask16>(left >= 16 ? 0xffffu : left <= 0 ? 0u : (1u << left) - 1u);
    }
    for (int64_t t = 0; t < T; ++t) {
      const __m512 pt = _mm512_set1_ps(p[t]);
      const float* vt = v + t * stride + d0;
#pragma GCC unroll 8
      for (int j = 0; j < kVecs; ++j) {
        acc[j] = _mm512_fmadd_ps(pt, _mm512_maskz_loadu_ps(mask[j], vt + 16 * j), acc[j]);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < kVecs; ++j) _mm512_mask_storeu_ps(out + d0 + 16 * j, mask[j], acc[j]);
  }
}

// "avx512vnni" and "avx512bf16" start from this table (matmul_avx512_vnni.cc,
// matmul_avx512_bf16.cc). No dense BF16 kernel: Context::MatMul widens BF16 weights with
// matmul_f32 instead. No Q8 kernels (they need AVX512-VNNI).
const KernelVariant kAvx512 = {
    .name = "avx512",
    .matmul_f32 = MatMulF32,
    .scores = Scores,
    .weighted_sum = WeightedSum,
    .attention = avx512_internal::Attention,
    .matmul_bf16_blocked = avx512_internal::MatMulBf16BlockedNoBf16,
    .rms_norm = avx512_internal::RmsNorm,
    .silu_mul = avx512_internal::SiluMul,
    .weighted_rows = avx512_internal::WeightedRows,
    .to_bf16 = avx512_internal::ToBf16,
    .apply_rope = avx512_internal::ApplyRope,
};

}  // namespace

const KernelVariant* Avx512Variant() { return &kAvx512; }

}  // namespace vls::kernels
