// The Q6 matmul (kernels/q6.h) for the avx2 variant: the design of matmul_avx2_q4.cc with 6-bit
// codes. One 32-byte half of a block's 64-byte code vector v holds 8 rows × 4 columns: the low
// nibbles are the low 4 bits of columns 4v .. 4v+3, the high nibbles those of 16+4v .. 16+4v+3;
// the same half of high-bit vector 0 (1) holds bits 4-5 of columns 4v .. 4v+3 (16+4v ..
// 16+4v+3) in bit pair v of each byte. 16-bit shifts and byte masks put the codes
// u = lo | hi << 4 of those 8 columns into two vectors; vpmaddubsw of each with 4 broadcast s8
// activations gives, per row, two int16 sums of 2 products, and vpmaddwd with ones adds the two
// vectors' sums into the row's int32 dot product.
//
// Exactness: a code is <= 63 and an activation in [-127, 127], so one vpmaddubsw lane is at most
// 2 · 63 · 127 = 16002 in magnitude (no saturation), and two of them (the low- and high-nibble
// columns of one code vector) sum in int16 to at most 32004 < 32767 (32256 even for −128); vpmaddwd
// with ones then takes every such pair to int32, where a group's dot (at most 32 · 63 · 127 in
// magnitude) is exact. The int32 accumulators start at −32 · Σqx (an exact integer in the f32
// sums), so they end at the reference's dot = Σ qx · u − 32 · Σqx. Per (m, n) the f32 steps are the
// reference's: t = f32(dot) · d, acc = fma(t, s, acc) in group order. So every result equals the
// reference's bit for bit.
//
// Every tile covers one row group (16 weight rows) and streams its codes, prefetching ahead in
// the code and scale streams (one stream each: tiles of 2 or 4 row groups, as the Q4 kernel's,
// ran 2-3 times slower at M = 1 on Zen 4). Decode (M <= 3) takes all rows in one tile. Batched
// decode and prefill take 4 rows per tile over chunks of row groups: the first row tile streams
// the codes and saves them unpacked (u8, 512 bytes a block) in a per-thread buffer of about
// 64 KiB that stays in L2, and the other row tiles run over those, so the unpacking is paid once
// per chunk instead of once per row tile.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/avx2_internal.h"
#include "kernels/q6.h"

namespace vls::kernels::avx2_internal {

namespace {

// One Q6 product: x[M, K] (quantized, row-major) times the blocked weights.
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

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Bits 4-5 of each byte of code vector v (0..3) from (half of) a high-bit vector h: bit pair v
// of every byte shifted to bits 4-5 (16-bit shifts; the mask drops what crossed a byte).
inline __m256i HighBits(__m256i h, int v, __m256i mask) {
  switch (v) {
    case 0: return _mm256_and_si256(_mm256_slli_epi16(h, 4), mask);
    case 1: return _mm256_and_si256(_mm256_slli_epi16(h, 2), mask);
    case 2: return _mm256_and_si256(h, mask);
    default: return _mm256_and_si256(_mm256_srli_epi16(h, 2), mask);
  }
}

// The codes u of half `half` (rows 8·half .. 8·half+7) of block blk for code vector v: *lo for
// columns 4v .. 4v+3, *hi for 16+4v .. 16+4v+3, each row's 4 at bytes 4r' .. 4r'+3.
inline void Codes(const uint8_t* blk, int half, int v, __m256i* lo, __m256i* hi) {
  const __m256i nibble = _mm256_set1_epi8(15), bits45 = _mm256_set1_epi8(0x30);
  const __m256i packed =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * v + 32 * half));
  const __m256i h0 =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6HighOffset + 32 * half));
  const __m256i h1 =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6HighOffset + 64 + 32 * half));
  *lo = _mm256_or_si256(_mm256_and_si256(packed, nibble), HighBits(h0, v, bits45));
  *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble),
                        HighBits(h1, v, bits45));
}

// acc + the int32 sums of 4 products of the codes (c0, c1: u8) and activations (x0, x1: s8);
// the two vpmaddubsw results add in int16 (at most 32004, see above). The empty asm pins the
// result to a register where it is computed, as in matmul_avx2_q4.cc.
inline __m256i AddProducts(__m256i acc, __m256i c0, __m256i x0, __m256i c1, __m256i x1,
                           __m256i ones) {
  const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(c0, x0), _mm256_maddubs_epi16(c1, x1));
  __m256i r = _mm256_add_epi32(acc, _mm256_madd_epi16(pair, ones));
  asm("" : "+x"(r));
  return r;
}

// Adds t = f32(dot) · d times s into facc (the reference's f32 steps), dot from the int32 sums.
inline void Accumulate(__m256i dot, __m256 d, float s, float* facc) {
  const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), d);
  _mm256_store_ps(facc, _mm256_fmadd_ps(t, _mm256_set1_ps(s), _mm256_load_ps(facc)));
}

// −32 · Σqx of (row, group) mg, where the int32 dot starts.
inline __m256i ZeroPoint(const Q6Problem& p, int64_t mg) {
  return _mm256_set1_epi32(-kQ6Zero * static_cast<int32_t>(p.xsum[mg]));
}

// Stores a tile's sums facc[MR][2][8] of row group G, in columns [n0, n1) only.
template <int MR>
void Store(const Q6Problem& p, int64_t m0, int64_t G, int64_t n0, int64_t n1,
           const float (&facc)[MR][2][8]) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int64_t nbase = G * 16 + 8 * h;
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

// The streaming tiles prefetch this many blocks ahead in the code and scale streams.
constexpr int64_t kPrefetchBlocks = 8;

// The unpacked codes of a block, as StreamTile saves them for BatchTile: 4 code vectors v of 128
// bytes, each the u of columns 4v .. 4v+3 (bytes 0 .. 63) and 16+4v .. 16+4v+3 (64 .. 127),
// row r at bytes 4r .. 4r+3 of its 64.
constexpr int64_t kUnpackedBytes = 512;

// Outputs y[m0 .. m0+MR, 16 G .. 16 G + 16] restricted to columns [n0, n1), streaming the codes
// of row group G from memory and unpacking them in registers. Half h of the tile is rows
// 8h .. 8h+7 of the row group. kSave: also stores the unpacked codes at `save` ([ng] blocks of
// kUnpackedBytes) for the other row tiles.
template <int MR, bool kSave>
void StreamTile(const Q6Problem& p, int64_t m0, int64_t G, int64_t n0, int64_t n1, uint8_t* save) {
  const int64_t K = p.K, ng = p.ng;
  const uint8_t* wg = p.w + G * ng * kQ6CodeBytes;
  const uint8_t* sg = p.scales + G * ng * 32;
  const int8_t* xm = p.xq + m0 * K;
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float facc[MR][2][8] = {};
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* blk = wg + g * kQ6CodeBytes;
    const int8_t* xg = xm + g * kQ6Group;
    // The blocks of consecutive row groups are contiguous: near the end of a row group this
    // fetches the start of the next one.
    const char* ahead = reinterpret_cast<const char*>(blk + kPrefetchBlocks * kQ6CodeBytes);
#pragma GCC unroll 6
    for (int c = 0; c < 6; ++c) _mm_prefetch(ahead + 64 * c, _MM_HINT_T0);
    if (g % 2 == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(sg + (g + kPrefetchBlocks) * 32), _MM_HINT_T0);
    }
    __m256i acc[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = ZeroPoint(p, (m0 + i) * ng + g);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        Codes(blk, h, v, &lo, &hi);
        if constexpr (kSave) {
          auto* out = reinterpret_cast<__m256i*>(save + g * kUnpackedBytes + 128 * v + 32 * h);
          _mm256_store_si256(out, lo);
          _mm256_store_si256(out + 2, hi);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m256i xl = Broadcast4(xg + i * K + 4 * v);
          const __m256i xh = Broadcast4(xg + i * K + 16 + 4 * v);
          acc[i][h] = AddProducts(acc[i][h], lo, xl, hi, xh, ones);
        }
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sg + g * 32 + 16 * h)));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) Accumulate(acc[i][h], d, p.xs[(m0 + i) * ng + g], facc[i][h]);
    }
  }
  Store<MR>(p, m0, G, n0, n1, facc);
}

// As StreamTile, from the codes of row group G that it saved at u.
template <int MR>
void BatchTile(const Q6Problem& p, const uint8_t* u, int64_t m0, int64_t G, int64_t n0,
               int64_t n1) {
  const int64_t K = p.K, ng = p.ng;
  const uint8_t* sg = p.scales + G * ng * 32;
  const int8_t* xm = p.xq + m0 * K;
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float facc[MR][2][8] = {};
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* ub = u + g * kUnpackedBytes;
    const int8_t* xg = xm + g * kQ6Group;
    __m256i acc[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = ZeroPoint(p, (m0 + i) * ng + g);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256i xl = Broadcast4(xg + i * K + 4 * v);
        const __m256i xh = Broadcast4(xg + i * K + 16 + 4 * v);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const auto* c = reinterpret_cast<const __m256i*>(ub + 128 * v + 32 * h);
          acc[i][h] =
              AddProducts(acc[i][h], _mm256_load_si256(c), xl, _mm256_load_si256(c + 2), xh, ones);
        }
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sg + g * 32 + 16 * h)));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) Accumulate(acc[i][h], d, p.xs[(m0 + i) * ng + g], facc[i][h]);
    }
  }
  Store<MR>(p, m0, G, n0, n1, facc);
}

// Decode (M <= 3): one streaming tile of all rows per row group. (Tiles of 2 and 4 row groups,
// as the Q4 kernel's, measured 2-3 times slower at M = 1 on Zen 4: one stream prefetches best.)
template <int MR>
void Decode(const Q6Problem& p, int64_t n0, int64_t n1) {
  for (int64_t G = n0 / 16; G < (n1 + 15) / 16; ++G) {
    StreamTile<MR, false>(p, 0, G, n0, n1, nullptr);
  }
}

// The last row tile of fewer than kBatchRows rows takes its own size.
template <int R>
void BatchRows(const Q6Problem& p, const uint8_t* u, int64_t mr, int64_t m0, int64_t G, int64_t n0,
               int64_t n1) {
  if constexpr (R >= 1) {
    if (mr == R) return BatchTile<R>(p, u, m0, G, n0, n1);
    BatchRows<R - 1>(p, u, mr, m0, G, n0, n1);
  }
}

constexpr int kBatchRows = 4;

// M >= kBatchRows: chunks of row groups whose unpacked codes (about kChunkBytes) stay in L2. The
// first row tile streams each row group and saves its codes; the others run over the saved codes.
void Batch(const Q6Problem& p, int64_t n0, int64_t n1) {
  constexpr int64_t kChunkBytes = 64 << 10;
  const int64_t G0 = n0 / 16, G1 = (n1 + 15) / 16;
  const int64_t rg_bytes = p.ng * kUnpackedBytes;
  const int64_t chunk = std::clamp<int64_t>(kChunkBytes / rg_bytes, 1, 8);
  struct alignas(32) Line {
    uint8_t b[32];
  };
  thread_local std::vector<Line> buffer;
  const auto lines = static_cast<size_t>(chunk * rg_bytes / 32);
  if (buffer.size() < lines) buffer.resize(lines);
  uint8_t* u = buffer.data()->b;
  for (int64_t gc = G0; gc < G1; gc += chunk) {
    const int64_t ge = std::min(G1, gc + chunk);
    for (int64_t G = gc; G < ge; ++G) {
      uint8_t* ug = u + (G - gc) * rg_bytes;
      if (p.M == kBatchRows) {
        StreamTile<kBatchRows, false>(p, 0, G, n0, n1, nullptr);
      } else {
        StreamTile<kBatchRows, true>(p, 0, G, n0, n1, ug);
      }
    }
    for (int64_t m0 = kBatchRows; m0 < p.M; m0 += kBatchRows) {
      const int64_t mr = std::min<int64_t>(kBatchRows, p.M - m0);
      for (int64_t G = gc; G < ge; ++G) {
        const uint8_t* ug = u + (G - gc) * rg_bytes;
        if (mr == kBatchRows) {
          BatchTile<kBatchRows>(p, ug, m0, G, n0, n1);
        } else {
          BatchRows<kBatchRows - 1>(p, ug, mr, m0, G, n0, n1);
        }
      }
    }
  }
}

}  // namespace

void MatMulQ6Avx2(const Q4Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const Q6Problem p{x.q,    x.scales, x.sums, x.rows,
                    x.cols, x.groups, base,   base + Q6ScalesOffset(w.rows, w.cols),
                    w.rows, y};
  static_assert(kBatchRows == 4, "Batch takes M >= kBatchRows");
  switch (p.M) {
    case 1: return Decode<1>(p, n0, n1);
    case 2: return Decode<2>(p, n0, n1);
    case 3: return Decode<3>(p, n0, n1);
    default: return Batch(p, n0, n1);
  }
}

}  // namespace vls::kernels::avx2_internal
