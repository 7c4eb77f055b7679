// Row-parallel helpers of the vision tower's fast path (vision_model.cc): the patch layout
// (segments and full-resolution coordinates in merge-window order), the interpolated position
// embedding, the 2-D rotary tables, LayerNorm, GELU and bias loops over a thread pool.
#ifndef VLSTACK_VISION_VISION_OPS_H_
#define VLSTACK_VISION_VISION_OPS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/grid_thw.h"

namespace vls::vision_internal {

// Work per pool loop of the tower, in floating-point operations. A larger product or attention
// pass runs as several loops one after another, because the server's image encoder is paced
// against the engine's steps one loop at a time (base/pool_pacer.h, ADR 0030): a loop this
// size holds the cores for 10–20 ms on the 2-core development machine, well under a decode step.
inline constexpr double kLoopFlops = 2e9;

// Calls fn(begin, end) over consecutive pieces of [0, n) in order: each a multiple of
// `multiple` long (but the last) and about kLoopFlops of work at `flops_each` per index.
void ForPieces(int64_t n, double flops_each, int64_t multiple,
               const std::function<void(int64_t, int64_t)>& fn);

// Where each patch row of one Encode input lies (spec §D.4: rows of an item in the order
// (t, bh, bw, ih, iw), an m × m merge window every m² rows).
struct PatchLayout {
  std::vector<int32_t> item;      // [Np] index of the row's grid
  std::vector<int32_t> row, col;  // [Np] full-resolution patch coordinates (bh·m+ih, bw·m+iw)
  // cu_seqlens: segment s (one temporal group of one item, h·w rows) is rows
  // [segments[s], segments[s+1]). REQUIRES for every function below: grids validated.
  std::vector<int64_t> segments;
};
PatchLayout MakePatchLayout(std::span<const GridThw> grids, int merge);

// The align_corners grid coordinate of index i of n over a table side G: i·(G−1)/(n−1)
// (0 when n == 1), and its bilinear neighbours and weight (coordinate − floor).
struct AxisSample {
  int32_t lo = 0, hi = 0;  // floor, min(floor + 1, G − 1)
  double frac = 0;         // coordinate − floor
};
AxisSample SampleAxis(int64_t i, int64_t n, int64_t side);

// out[Np, D] = bilinear interpolation of table[G², D] at each row's (row, col) on its item's
// (h, w) grid (weights rounded to f32, four-term sum in f32), over the pool.
void InterpolatePositions(const PatchLayout& layout, std::span<const GridThw> grids,
                          const float* table, int64_t side, int64_t D, float* out,
                          ThreadPool& pool);

// cos/sin [Np, hd/2] of the 2-D rotary: slot i < hd/4 turns by row·inv_freq[i], slot hd/4 + i
// by col·inv_freq[i], inv_freq[i] = 10000^(−4i/hd); computed in double, rounded to f32.
void RotaryTables(const PatchLayout& layout, int64_t head_dim, float* cos, float* sin,
                  ThreadPool& pool);

// out[M, n] = (x − mean) / sqrt(var + eps) · w + b per row (biased variance; double
// accumulators). `out` may alias `x`. `avx512`: the AVX-512 row loop (f32 accumulators in 16
// lanes, two passes; within 1e-6 relative of the double form), REQUIRES: the CPU has AVX-512F;
// ignored in builds without it. The same flag below.
void LayerNormRows(const float* x, int64_t M, int64_t n, const float* w, const float* b, float eps,
                   float* out, ThreadPool& pool, bool avx512 = false);

// y[M, n] += b[n] per row.
void AddBias(float* y, int64_t M, int64_t n, const float* b, ThreadPool& pool, bool avx512 = false);
// x[M, n] += y[M, n] + b[n].
void AddBiasResidual(float* x, const float* y, int64_t M, int64_t n, const float* b,
                     ThreadPool& pool, bool avx512 = false);
// x[M, n] += y[M, n] + b[n], then out[M, n] = LayerNorm(x) with (w, b2, eps) as LayerNormRows,
// one pass over each row while it is in cache.
void AddBiasResidualLayerNorm(float* x, const float* y, int64_t M, int64_t n, const float* b,
                              const float* w, const float* b2, float eps, float* out,
                              ThreadPool& pool, bool avx512);
// y[M, n] = GELU(y + b), tanh approximation (gelu_pytorch_tanh) or exact erf (nn.GELU()).
void AddBiasGeluTanh(float* y, int64_t M, int64_t n, const float* b, bool avx512, ThreadPool& pool);
void AddBiasGeluErf(float* y, int64_t M, int64_t n, const float* b, ThreadPool& pool);

// Scalar rows (the references of the AVX-512 loops).
void LayerNormRow(const float* x, int64_t n, const float* w, const float* b, float eps, float* out);
// AVX-512 rows (vision_avx512.cc). y may be null in AddRowsAvx512 (x += b).
void LayerNormRowAvx512(const float* x, int64_t n, const float* w, const float* b, float eps,
                        float* out);
void AddRowsAvx512(float* x, const float* y, const float* b, int64_t n);
float GeluTanh(float x);
// The AVX-512 loops below and their scalar forms above agree to f32 rounding (tested).
// The AVX-512 row loop of AddBiasGeluTanh (vision_avx512.cc): y[n] = GELU_tanh(y + b).
void AddBiasGeluTanhAvx512(float* y, const float* b, int64_t n);
float GeluErf(float x);

// Wall time and FLOPs per phase of the fast path, summed over Encode calls while installed
// (benchmarks: bench/vision_bench.cc --profile). Off (null) by default; costs one load per
// phase then.
enum EncodePhase {
  kPhasePatch,      // patch embedding matmul + positions
  kPhaseNorm,       // LayerNorm 1 and 2
  kPhaseQkv,        // qkv matmul [Np, Dv] x [3Dv, Dv]^T
  kPhaseBias,       // bias adds, residuals
  kPhaseRope,       // rotary + packing q/k/v per head
  kPhaseAttention,  // softmax(QK^T)V
  kPhaseProj,       // proj matmul [Np, Dv] x [Dv, Dv]^T
  kPhaseFc1,        // fc1 matmul [Np, Dv] x [Iv, Dv]^T
  kPhaseGelu,       // fc1 bias + GELU
  kPhaseFc2,        // fc2 matmul [Np, Iv] x [Dv, Iv]^T
  kPhaseMerger,     // the mergers
  kPhaseCount
};
const char* EncodePhaseName(int phase);
struct EncodeProfile {
  double seconds[kPhaseCount] = {};
  double flops[kPhaseCount] = {};
};
// Process-wide; not synchronised: install before encoding, read after.
void SetEncodeProfile(EncodeProfile* profile);
EncodeProfile* CurrentEncodeProfile();

// Adds the time from construction to destruction (and `flops`) to phase `p` of the installed
// profile, if any.
class PhaseTimer {
 public:
  PhaseTimer(EncodePhase p, double flops) : profile_(CurrentEncodeProfile()), phase_(p) {
    if (profile_ != nullptr) {
      start_ = std::chrono::steady_clock::now();
      profile_->flops[p] += flops;
    }
  }
  ~PhaseTimer() {
    if (profile_ != nullptr) {
      profile_->seconds[phase_] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  EncodeProfile* profile_;
  EncodePhase phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace vls::vision_internal

#endif  // VLSTACK_VISION_VISION_OPS_H_
