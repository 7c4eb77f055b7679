// Prefill matmuls through oneDNN's matmul primitive: BF16 activations × BF16 weights with f32
// accumulation and f32 output, the same arithmetic as the "avx512bf16" variant's kernel
// (products of two BF16 values are exact in f32; only the order of the f32 sums differs).
//
// oneDNN (Debian's libdnnl, OpenMP runtime) pays off from a few dozen activation rows up; for
// decode (M of 1..8) the own kernel streams weights at memory bandwidth and stays faster.
// Context::MatMul picks between the two (see dispatch.cc); this file is the oneDNN side only.
//
// Threads: OneDnnMatMulBf16Columns runs on the calling thread only (Context::MatMul spreads
// column blocks over its pool: what it routes by default). OneDnnMatMulBf16, the packed
// MatMul and OneDnnMatMulRoundingX run on the calling thread plus an OpenMP team, `threads` in
// total (omp_set_num_threads on the calling thread before the primitive is created and run);
// the caller must keep its own pool idle meanwhile (Context::MatMul calls them through
// ThreadPool::RunExclusive).
//
// Scratch: each call takes the caller's scratch arena (kernels/scratch.h; Context passes the
// arena of the participant making the call) and keeps oneDNN's scratchpad there; with none it
// allocates one for that call only (tests, benchmarks).
//
// Without oneDNN in the build every function here reports kUnimplemented and
// OneDnnBf16Available() is false.
#ifndef VLSTACK_KERNELS_ONEDNN_MATMUL_H_
#define VLSTACK_KERNELS_ONEDNN_MATMUL_H_

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"

namespace vls::kernels {

// True when the build has oneDNN and its BF16 matmul for this CPU is a JIT kernel (not its
// slow reference implementation). Checked once per process; thread safe.
bool OneDnnBf16Available();

// y[M, N] (f32, row-major) = xb[M, K] (BF16, row-major, already rounded) · w[N, K]ᵀ, with w
// BF16 row-major [N, K] (PyTorch Linear layout), read in place (oneDNN sees it as [K, N] with
// strides {1, K}, format tag `ba`, and copies panels into its own blocked layout per call).
// Thread safe: primitives are created once per (M, K, N, threads) and cached; each call uses
// the scratchpad of its own `scratch` arena. REQUIRES: w.dtype == kBF16, w.cols == K, M, K, N > 0,
// threads >= 1. Errors: kUnimplemented (no oneDNN), kInvalidArgument, kInternal (oneDNN failed).
Status OneDnnMatMulBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int threads,
                        float* y, ScratchArena* scratch = nullptr);

// y[M, n0:n1] (row stride N = w.rows) = xb[M, K] · w[n0:n1, K]ᵀ on the calling thread only

// (oneDNN with a team of one): the caller splits N over its own pool, so no OpenMP team runs
// and a late pool thread does not stall the others (oneDNN's split is static). Primitives are
// cached per (M, K, n1 - n0, N). REQUIRES: as OneDnnMatMulBf16, 0 <= n0 < n1 <= N.
Status OneDnnMatMulBf16Columns(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w,
                               int64_t n0, int64_t n1, float* y, ScratchArena* scratch = nullptr);

// y[m0:m1, N] (f32, row-major) = xb[m0:m1, K] · wᵀ for BF16 blocked weights (bf16_blocked.h),
// which are oneDNN's own BA16a64b2a layout and are read in place, on the calling thread only
// (Context::MatMul spreads row blocks over its pool: oneDNN's brgemm accepts a blocked weight
// layout only with a dense destination, so column blocks of a wider y are not possible).
// Primitives are cached per (m1 - m0, K, N). REQUIRES: w.format == kBf16Blocked, w.cols == K,
// 0 <= m0 < m1 <= M. Errors as OneDnnMatMulBf16.
Status OneDnnMatMulBf16BlockedRows(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w,
                                   int64_t m0, int64_t m1, float* y,
                                   ScratchArena* scratch = nullptr);

class OneDnnPackedBf16;

// Context::MatMul's oneDNN path: rounds x[M, K] (f32) to BF16 (nearest even, as F32ToBf16)
// on the same OpenMP team that then runs the product (no second pool wakes up while the team's
// workers still spin), then y[M, N] = xb · w[N, K]ᵀ, from `packed` when given, else from w in
// place. The rounded activations are kept in scratch->onednn_x. REQUIRES: as
// OneDnnMatMulBf16; packed, when given, holds w (rows N, cols K).
Status OneDnnMatMulRoundingX(const float* x, int64_t M, int64_t K, const Matrix& w,
                             const OneDnnPackedBf16* packed, int threads, float* y,
                             ScratchArena* scratch = nullptr);

// Weights [N, K] BF16 packed once into the blocked layout oneDNN's BF16 matmul prefers on this
// CPU (one reorder, at model load), so a prefill call skips the per-call panel copy.
//
// Plugging into the prepared-weights step (model/prepared_weights.h): for each BF16 matrix
// w [N, K] row-major it owns (stacked qkv, o, gate_up, down), call
// OneDnnPackedBf16::Create(w, ctx.pool().threads()) once and keep the result beside w; then
// pass it as the last argument of Context::MatMul.
// The packed copy is the same size as w (N·K·2 bytes plus padding to the block size). The
// caller still keeps w: decode rows (M below the crossover) run the own kernel on [N, K].
//
// Thread safety: immutable after Create; MatMul may be called concurrently.
class OneDnnPackedBf16 {
 public:
  // Packs w. REQUIRES: w.dtype == kBF16, threads >= 1 (the count later MatMul calls use is
  // free; the layout is chosen for `threads`). Errors as OneDnnMatMulBf16.
  static StatusOr<std::unique_ptr<OneDnnPackedBf16>> Create(const Matrix& w, int threads);
  ~OneDnnPackedBf16();
  OneDnnPackedBf16(const OneDnnPackedBf16&) = delete;
  OneDnnPackedBf16& operator=(const OneDnnPackedBf16&) = delete;

  int64_t rows() const { return rows_; }  // N
  int64_t cols() const { return cols_; }  // K
  size_t bytes() const;                   // size of the packed copy

  // y[M, N] (f32) = xb[M, K] (BF16) · wᵀ with the packed weights. REQUIRES: M > 0,
  // threads >= 1. Errors: kInternal when oneDNN cannot run the packed layout for this M.
  Status MatMul(const uint16_t* xb, int64_t M, int threads, float* y,
                ScratchArena* scratch = nullptr) const;

  struct Impl;  // oneDNN objects (defined in onednn_matmul.cc)

 private:
  OneDnnPackedBf16(int64_t rows, int64_t cols, std::unique_ptr<Impl> impl);
  int64_t rows_;
  int64_t cols_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_ONEDNN_MATMUL_H_
