// The AMX tile kernel (kernels/amx.h, ADR 0034). Compiled with -mamx-tile -mamx-int8 and the
// AVX-512 flags; only called where AmxAvailable().
//
// Tiles: 0 and 1 hold the int32 sums of two blocks (up to 16 activation rows × 16 weight rows),
// 2 and 3 their activations (those rows × the block's 32 bytes), 4 and 5 their weights (8 rows
// of 4 columns × 16 weight rows: the VNNI layout the Q8 format stores). A block's sums are stored
// (1 KiB, L1) and combined into 16 f32 accumulator vectors that stay in registers: per row,
// convert, multiply by the activation scale, fma with the weight scales, as the reference.
// Blocks go in pairs, two tiles of sums in flight.
#include <asm/prctl.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/amx.h"
#include "kernels/dispatch.h"
#include "kernels/matmul_tiles.h"

namespace vls::kernels {

namespace {

// The bit of the tile data in XSAVE's feature numbering (Linux's XFEATURE_XTILEDATA).
constexpr int kXFeatureTileData = 18;

bool CpuReportsAmxInt8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  constexpr unsigned kAmxTile = 1u << 24, kAmxInt8 = 1u << 25;  // CPUID.(7,0):EDX
  return (d & kAmxTile) != 0 && (d & kAmxInt8) != 0;
}

bool DetectAmx() {
  if (const char* env = std::getenv("VLS_AMX"); env != nullptr && std::strcmp(env, "0") == 0) {
    return false;
  }
  if (!CpuReportsAmxInt8()) return false;
  // Linux hands a process the 8 KiB tile state only when asked (a guest may still refuse).
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, kXFeatureTileData) == 0;
}

// The LDTILECFG operand: palette 1, each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr int64_t kBlock = 32;        // columns per block (kQ8Block)
constexpr int64_t kBlockBytes = 512;  // one block's weights in the VNNI layout: 8 × 64
constexpr int64_t kTileRows = 16;     // activation rows per tile
static_assert(kQ8Block == kBlock);

// Tiles 0 and 1 hold the sums of `rows` activation rows, 2 and 3 those rows' activations, 4
// and 5 the weights.
TileConfig MakeConfig(int rows) {
  TileConfig c;
  for (int t = 0; t < 2; ++t) {  // sums
    c.rows[t] = static_cast<uint8_t>(rows);
    c.bytes_per_row[t] = 64;
  }
  for (int t = 2; t < 4; ++t) {  // activations
    c.rows[t] = static_cast<uint8_t>(rows);
    c.bytes_per_row[t] = kBlock;
  }
  for (int t = 4; t < 6; ++t) {  // weights
    c.rows[t] = kBlock / 4;
    c.bytes_per_row[t] = 64;
  }
  return c;
}

// The calling thread's tiles, configured for windows of `rows` activation rows (tiles 0-3; the
// configuration zeroes every tile) for one call and released at its end (a thread holding tile
// state makes every context switch save 8 KiB more).
class Tiles {
 public:
  explicit Tiles(int rows) {
    const TileConfig config = MakeConfig(rows);
    _tile_loadconfig(&config);
  }
  ~Tiles() { _tile_release(); }
  Tiles(const Tiles&) = delete;
  Tiles& operator=(const Tiles&) = delete;
};

// GCC's tile intrinsics are asm statements that name only addresses: this tells the compiler
// that memory was written by a tile store (or must be written before a tile load).
inline void MemoryBarrier() { asm volatile("" ::: "memory"); }

inline __mmask16 ColumnMask(int64_t nbase, int64_t n0, int64_t n1) {
  const int64_t lo = std::max(n0, nbase) - nbase, hi = std::min(n1, nbase + 16) - nbase;
  const auto bits = [](int64_t n) {
    return n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << static_cast<unsigned>(n)) - 1u;
  };
  return static_cast<__mmask16>(bits(hi) & ~bits(lo));
}

template <int R>
inline void StoreRows(const __m512 (&acc)[R], float* y, int64_t N, int64_t m0, int64_t nbase,
                      __mmask16 mask) {
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) _mm512_mask_storeu_ps(y + (m0 + i) * N + nbase, mask, acc[i]);
}

// ---- Q8 --------------------------------------------------------------------------------------

// acc[i] = fma(f32(dots[i]) · xs[i], sw, acc[i]) for the R rows of one block; xs holds the
// block's activation scales of the tile's rows, one after another.
template <int R>
inline void AddQ8Block(const int32_t* dots, const float* xs, const uint16_t* ws, __m512 (&acc)[R]) {
  const __m512 sw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws)));
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    const __m512 t =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots + 16 * i)), _mm512_set1_ps(xs[i]));
    acc[i] = _mm512_fmadd_ps(t, sw, acc[i]);
  }
}

// Prefetch distance of the weights on a group's first pass, bytes: two block pairs ahead (1024
// to 4096 measured alike, ADR 0034).
constexpr int64_t kPrefetchBytes = 2048;

// y[m0 + skip .. m0 + skip + R, 16 g .. 16 g + 16] ∩ columns [n0, n1): tiles 0-3 configured
// for the rows of a window from m0 (skip + R of them), of which the last R are combined (the
// first `skip` are another tile's). Blocks go in pairs, two tiles of sums in flight. xs: the
// window's activation scales, [nb, kTileRows]. `first`: the group's first pass, its weights
// coming from memory (prefetched ahead).
template <int R>
void Q8Tile(const Q8Activations& x, const float* xs, const Matrix& w, int64_t m0, int skip,
            int64_t g, int64_t n0, int64_t n1, float* y, bool first) {
  const int64_t K = x.cols, nb = x.blocks;
  const int8_t* a = x.q.data() + m0 * K;                                    // [skip + R, K]
  const int8_t* b = static_cast<const int8_t*>(w.data) + g * (K / 4) * 64;  // [K / 4, 16, 4]
  const uint16_t* ws = w.scales + g * nb * 16;                              // [nb, 16]
  xs += skip;
  alignas(64) int32_t dots[2][kTileRows * 16];
  // Unrolled (not a range-for) so that the accumulators stay in registers: an array GCC cannot
  // split into registers lives on the stack, every block loading and storing it.
  __m512 acc[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  int64_t blk = 0;
  for (; blk + 2 <= nb; blk += 2) {
    if (first) {
      // The hardware prefetchers leave the tile loads waiting on memory. Past the group's end
      // this touches the next group's weights (a prefetch never faults).
      const int8_t* ahead = b + blk * kBlockBytes + kPrefetchBytes;
#pragma GCC unroll 16
      for (int l = 0; l < 2 * kBlockBytes / 64; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
      }
    }
    _tile_zero(0);
    _tile_loadd(2, a + blk * kBlock, K);
    _tile_loadd(4, b + blk * kBlockBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_zero(1);
    _tile_loadd(3, a + (blk + 1) * kBlock, K);
    _tile_loadd(5, b + (blk + 1) * kBlockBytes, 64);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, dots[0], 64);
    _tile_stored(1, dots[1], 64);
    MemoryBarrier();
    AddQ8Block<R>(dots[0] + 16 * skip, xs + blk * kTileRows, ws + blk * 16, acc);
    AddQ8Block<R>(dots[1] + 16 * skip, xs + (blk + 1) * kTileRows, ws + (blk + 1) * 16, acc);
  }
  if (blk < nb) {
    _tile_zero(0);
    _tile_loadd(2, a + blk * kBlock, K);
    _tile_loadd(4, b + blk * kBlockBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, dots[0], 64);
    MemoryBarrier();
    AddQ8Block<R>(dots[0] + 16 * skip, xs + blk * kTileRows, ws + blk * 16, acc);
  }
  StoreRows<R>(acc, y, w.rows, m0 + skip, g * 16, ColumnMask(g * 16, n0, n1));
}

// ---- The entries of the AVX512-BF16 variants where the tiles run -----------------------------

void MatMulQ8AmxOrVnni(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  if (AmxQ8Applies(x)) return MatMulQ8Amx(x, w, n0, n1, y);
  Avx512VnniVariant()->matmul_q8(x, w, n0, n1, y);
}

void MatMulQ8AmxOrVnniFourStreams(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                                  float* y) {
  if (AmxQ8Applies(x)) return MatMulQ8Amx(x, w, n0, n1, y);
  Avx512VnniVariant()->matmul_q8_four_streams(x, w, n0, n1, y);
}

}  // namespace

bool AmxAvailable() {
  static const bool available = DetectAmx();
  return available;
}

bool AmxQ8Applies(const Q8Activations& x) {
  return x.rows >= kAmxMinRows && x.cols % kQ8Block == 0 && AmxAvailable();
}

void MatMulQ8Amx(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const int64_t nb = x.blocks, full = x.rows / kTileRows * kTileRows;
  const int rest = static_cast<int>(x.rows - full);
  // Row windows: the 16-row tiles, then one for the last rows. With a tile before them, that
  // window is the product's last 16 rows, its first 16 - rest rows the tile's again (their sums
  // not combined): one tile configuration for the whole call, where a configuration per
  // height (two a group) cost more than the rows recomputed (ADR 0034). Alone, the last rows
  // are a window of their own height.
  const int64_t windows = full / kTileRows + (rest > 0 ? 1 : 0);
  const int64_t last_start = full > 0 ? x.rows - kTileRows : 0;
  const int last_skip = full > 0 ? kTileRows - rest : 0;
  const auto start = [&](int64_t win) {
    return win * kTileRows < full ? win * kTileRows : last_start;
  };
  // Each window's activation scales, its rows one after another per block (each row's
  // broadcast from one base address): [windows, nb, kTileRows].
  std::vector<float> xs(static_cast<size_t>(windows * nb * kTileRows));
  for (int64_t win = 0; win < windows; ++win) {
    const int64_t m0 = start(win), rows = std::min<int64_t>(kTileRows, x.rows - m0);
    for (int64_t i = 0; i < rows; ++i) {
      float* t = xs.data() + win * nb * kTileRows + i;
      const float* s = x.scales.data() + (m0 + i) * nb;
      for (int64_t blk = 0; blk < nb; ++blk) t[blk * kTileRows] = s[blk];
    }
  }
  const Tiles tile_state(full > 0 ? static_cast<int>(kTileRows) : rest);
  // Per group of 16 weight rows, every window while its weights are in L1.
  for (int64_t g = n0 / 16; g < (n1 + 15) / 16; ++g) {
    for (int64_t m0 = 0; m0 < full; m0 += kTileRows) {
      Q8Tile<kTileRows>(x, xs.data() + m0 * nb, w, m0, 0, g, n0, n1, y, m0 == 0);
    }
    if (rest > 0) {
      tiles::DispatchHeight<kTileRows - 1>(rest, [&](auto r) {
        Q8Tile<decltype(r)::value>(x, xs.data() + (windows - 1) * nb * kTileRows, w, last_start,
                                   last_skip, g, n0, n1, y, full == 0);
      });
    }
  }
}

bool UsesAmxTiles(const KernelVariant& v) { return v.matmul_q8 == MatMulQ8AmxOrVnni; }

void UseAmxTiles(KernelVariant* v) {
  if (!AmxAvailable()) return;
  v->matmul_q8 = MatMulQ8AmxOrVnni;
  v->matmul_q8_four_streams = MatMulQ8AmxOrVnniFourStreams;
}

}  // namespace vls::kernels
