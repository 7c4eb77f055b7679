// Kernel variants chosen once at start-up by CPU features, and the per-model execution
// context (thread pool, chosen variant, precision and per-thread scratch arenas) the model
// passes to every op.
//
// Every variant computes the same functions as the scalar reference in kernels.h; a test runs
// each variant the CPU supports against the reference (kernels_dispatch_test.cc).
#ifndef VLSTACK_KERNELS_DISPATCH_H_
#define VLSTACK_KERNELS_DISPATCH_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/scratch.h"
#include "kernels/stream_tuner.h"

namespace vls::kernels {

// What matmuls compute in.
//   kF32:  f32 activations, weights widened from their stored dtype, f32 accumulation. Equal
//          to the reference up to f32 summation order. The default and the oracle-tested path.
//   kBF16: activations rounded to BF16 (round to nearest even), products against BF16 weights,
//          f32 accumulation (AVX512_BF16 dot products). Weights stored as F32/F16 fall back to
//          the kF32 computation, as does a variant without a BF16 kernel. BF16 blocked
//          matrices (kernels/bf16_blocked.h) take this path under every precision.
//   kInt8: weights prepared as Q8 (quant.h), activations quantized per row and block per call,
//          int32 block sums. Q8 matrices take this path under every precision (they cannot be
//          read otherwise); dense matrices are computed as in kF32.
//   kInt4: weights prepared as Q4 (q4.h: 4-bit codes, F16 scale and min per 32 columns; the
//          LM head as Q6, q6.h: 6-bit codes, an F16 scale per 32 columns; matrices neither can
//          hold as Q8), activations quantized per row and 32 columns per call, int32 group
//          sums. Q4 and Q6 matrices take this path under every precision.
enum class Precision { kF32, kBF16, kInt8, kInt4 };
class OneDnnPackedBf16;  // kernels/onednn_matmul.h
struct Q4Kernels;        // kernels/q4.h
const char* PrecisionName(Precision p);

// One implementation of the hot ops: a table of entries, filled by name (designated
// initializers). Matmul entries compute y[m, n] for every m < M and n in [n0, n1) of
// y[M, N] = x[M, K] · w[N, K]ᵀ (y has row stride N = w.rows), so callers split N across
// threads. Entries that may be null say so, and what runs in their place.
struct KernelVariant {
  const char* name = nullptr;
  void (*matmul_f32)(const float* x, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
                     float* y) = nullptr;
  // xb[M, K] holds activations already rounded to BF16. REQUIRES: w.dtype == kBF16.
  // Null when the variant has no BF16 kernel.
  void (*matmul_bf16)(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                      int64_t n1, float* y) = nullptr;
  // Attention over one head (the reference attention path): out[t] = scale · q[D]·k_t for
  // t < T, with key row t at k + t·stride; and out[D] = Σ_t p[t] · v_t (v_t at v + t·stride;
  // `out` is overwritten).
  void (*scores)(const float* q, const float* k, int64_t stride, int64_t T, int64_t D, float scale,
                 float* out) = nullptr;
  void (*weighted_sum)(const float* p, const float* v, int64_t stride, int64_t T, int64_t D,
                       float* out) = nullptr;
  // Q8 (quant.h). quantize_q8 fills x->q, x->scales and x->sums for rows [r0, r1) of x[x->rows,
  // x->cols], with the same results as QuantizeActivationsQ8. matmul_q8 computes y[m, n0:n1]
  // from x and a kQ8 matrix w, with the same results as the reference:
  // block sums in int32, then f32 in block order. Null when the variant has no Q8 kernels. The
  // AVX512-BF16 variants take products of kAmxMinRows rows and more to AMX tiles where the CPU
  // and the OS give them (kernels/amx.h, ADR 0034).
  void (*quantize_q8)(const float* x, int64_t r0, int64_t r1, Q8Activations* a) = nullptr;
  void (*matmul_q8)(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                    float* y) = nullptr;
  // As matmul_q8, with the same results bit for bit, but its decode tiles (x.rows ≤ 3) read
  // four groups of 16 weight rows at once: four weight streams per thread instead of one
  // (ADR 0033; Context::MatMulGrouped chooses by measuring). Null when the variant has none.
  void (*matmul_q8_four_streams)(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1,
                                 float* y) = nullptr;
  // Blocked online-softmax attention of one work item (kernels/attention.h), its state in
  // `scratch` (the calling participant's ScratchArena::attention). Null in the reference
  // variant, whose attention is the plain per-(row, head) scores/softmax/weighted_sum.
  void (*attention)(const AttentionTile& tile, ScratchBuffer& scratch) = nullptr;
  // True when `attention` over a BF16 cache with K in key tiles (AttentionTile::k_tiles) rounds
  // the queries and the softmax weights to BF16 for its products
  // (avx512_internal::AttentionBf16): its results are then within BF16 rounding of the f32
  // attention, not within f32 rounding. Only such variants are handed key tiles.
  bool attention_bf16_products = false;
  // As matmul_bf16 for a kBf16Blocked w (kernels/bf16_blocked.h). REQUIRES: n0 a multiple of
  // kBf16BlockN. Null when the variant has none (Context::MatMul then runs the reference).
  void (*matmul_bf16_blocked)(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                              int64_t n1, float* y) = nullptr;
  // As kernels::RmsNorm and kernels::SiluMul (kernels.h), within f32 rounding of them (another
  // summation order, a polynomial exp). Null: Context runs those.
  void (*rms_norm)(const float* x, int64_t M, int64_t n, const float* weight, float eps,
                   float* out) = nullptr;
  void (*silu_mul)(float* gate, const float* up, int64_t n) = nullptr;
  // As kernels::WeightedRows bit for bit. Null: that.
  void (*weighted_rows)(const float* w, const float* const* rows, int64_t k, int64_t n,
                        float* out) = nullptr;
  // out[n] = F32ToBf16(x[n]) bit for bit (tensor/dtype.h). Null: a scalar loop.
  void (*to_bf16)(const float* x, int64_t n, uint16_t* out) = nullptr;
  // As kernels::ApplyRope, within f32 rounding of it (fused multiply-adds). Null: that.
  void (*apply_rope)(float* x, const float* cos, const float* sin, int64_t D) = nullptr;
  // The Q4 entries (kernels/q4.h). Null: the reference's.
  const Q4Kernels* q4 = nullptr;
  // False when Context keeps this variant's BF16 blocked matmuls on matmul_bf16_blocked at every
  // row count instead of handing kOneDnnMinRows rows and more to oneDNN ("avx512bf16-fma", the
  // default where its f32 FMA kernel beats oneDNN and the BF16 dot product; ADR 0031).
  bool onednn_blocked = true;
};

// The scalar reference (always available).
const KernelVariant& ReferenceVariant();
// Every variant this CPU can run, reference first.
std::vector<const KernelVariant*> SupportedVariants();
// Whether v is one of the AVX-512 variants: callers with AVX-512 code of their own (the vision
// tower) run it only then. Any other non-reference variant ("avx2") runs on CPUs without it.
bool IsAvx512Variant(const KernelVariant& v);
// The variant used by default: the environment variable VLS_KERNELS names one ("reference",
// "avx2", "avx512", "avx512vnni", "avx512bf16-fma", "avx512bf16"); otherwise the fastest
// supported: the last one, except that on AVX512-BF16 CPUs a short measurement chooses between
// "avx512bf16" and "avx512bf16-fma" (kernels/gemm_probe.h). Chosen once per process.
const KernelVariant& DefaultVariant();

// One product of Context::MatMulGrouped: y[M, w->rows] = x[M, K] · w->ᵀ (y row stride w->rows).
struct GroupedProduct {
  const float* x = nullptr;
  int64_t M = 0;
  const Matrix* w = nullptr;
  float* y = nullptr;
  // Null: the product's rows are x's first M. Otherwise row r is x[rows[r]] (row stride K): the
  // rows are gathered from x, shared by all the call's products (a sparse layer's experts each
  // taking some rows of one input). Either every product of a call sets rows, or none does.
  const int32_t* rows = nullptr;
};

// Whether MatMulGrouped converts each shared source row once for `products` when they gather
// their rows (GroupedProduct::rows): every product's weights quantized (Q8, or Q4 and Q6, whose
// activations are the same), so that the converted rows, not the f32 ones, are gathered.
// Otherwise it gathers the f32 rows first, on the calling thread; a caller with many rows
// gathers them itself, over the pool.
bool GroupedConvertsSourceOnce(std::span<const GroupedProduct> products);

// Thread safety: const methods may be called from any thread. Context::MatMul holds the pool
// (a ThreadPool::Lease) while it runs, so concurrent products run one after the other, as
// their loops would anyway.
class Context {
 public:
  // `threads`: 0 = all hardware threads. `variant`: null = DefaultVariant().
  Context(int threads, Precision precision, const KernelVariant* variant = nullptr);

  ThreadPool& pool() const { return *pool_; }
  Precision precision() const { return precision_; }
  const KernelVariant& variant() const { return *variant_; }

  // The scratch arena of participant `thread` of pool() (kernels/scratch.h).
  // REQUIRES: 0 <= thread < pool().threads(), and the caller is that participant now: a loop
  // body told `thread`, or the holder of a ThreadPool::Lease whose thread() it is.
  ScratchArena& scratch(int thread) const { return arenas_[static_cast<size_t>(thread)]; }
  // Bytes every participant's scratch arena holds now. Callable from any thread at any time
  // (a memory report while requests run); the arenas only grow.
  size_t ScratchBytes() const;

  // y[M, N] = x[M, K] · w[N, K]ᵀ over the pool, in this context's precision. REQUIRES: w.cols == K.
  // In kBF16 with BF16 weights, a non-reference variant and M >= kOneDnnMinRows, the product
  // runs through oneDNN when the build has it (VLS_ONEDNN=0 turns that off): blocks of
  // kOneDnnCols columns over the pool, one oneDNN thread each. `packed`, when given, is w
  // packed by OneDnnPackedBf16::Create and runs as one call on oneDNN's OpenMP team instead.
  // BF16 blocked w (the prepared form for kBF16, ADR 0010): oneDNN reads it in place in row
  // blocks over the pool from kOneDnnMinRows rows; below, the variant's blocked kernel.
  // Converted activations (BF16, Q8) live in the caller's scratch arena.
  void MatMul(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
              const OneDnnPackedBf16* packed = nullptr) const;
  // Every product of `products` (each w->cols == K), with the results MatMul gives each of them
  // alone. Meant for the experts of a sparse layer (ADR 0027): many products of few rows, which
  // one MatMul each would dispatch one after the other; here they share one pass over the pool,
  // items of (product, column block) spread by cost. Products that gather their rows
  // (GroupedProduct::rows) give the results of products over the gathered rows.
  void MatMulGrouped(std::span<const GroupedProduct> products, int64_t K) const;
  // The choice of weight streams for the decode tiles of MatMulGrouped's Q8 products, measured
  // on its own calls (kernels/stream_tuner.h, ADR 0033).
  const StreamTuner& stream_tuner() const { return *stream_tuner_; }
  bool uses_onednn() const { return use_onednn_; }
  // Keeps every matmul on this context's own kernels (benchmarks, A/B comparisons).
  void DisableOneDnn() { use_onednn_ = false; }
  void Scores(const float* q, const float* k, int64_t stride, int64_t T, int64_t D, float scale,
              float* out) const {
    variant_->scores(q, k, stride, T, D, scale, out);
  }
  void WeightedSum(const float* p, const float* v, int64_t stride, int64_t T, int64_t D,
                   float* out) const {
    variant_->weighted_sum(p, v, stride, T, D, out);
  }
  // out[M, n] = RmsNorm of x[M, n] rows with weight[n]; gate[n] = SiLU(gate) · up (kernels.h),
  // on the calling thread.
  void RmsNorm(const float* x, int64_t M, int64_t n, const float* weight, float eps,
               float* out) const {
    (variant_->rms_norm != nullptr ? variant_->rms_norm : kernels::RmsNorm)(x, M, n, weight, eps,
                                                                            out);
  }
  void SiluMul(float* gate, const float* up, int64_t n) const {
    (variant_->silu_mul != nullptr ? variant_->silu_mul : kernels::SiluMul)(gate, up, n);
  }
  void WeightedRows(const float* w, const float* const* rows, int64_t k, int64_t n,
                    float* out) const {
    (variant_->weighted_rows != nullptr ? variant_->weighted_rows : kernels::WeightedRows)(
        w, rows, k, n, out);
  }
  void ApplyRope(float* x, const float* cos, const float* sin, int64_t D) const {
    (variant_->apply_rope != nullptr ? variant_->apply_rope : kernels::ApplyRope)(x, cos, sin, D);
  }

 private:
  // x[M, K] rounded to BF16 over the pool, into own.matmul_x.
  const uint16_t* RoundToBf16(const float* x, int64_t M, int64_t K, ScratchArena& own) const;
  void MatMulQ8(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                ScratchArena& own) const;
  void MatMulBf16Blocked(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                         ScratchArena& own) const;
  // Q4 or Q6 weights (both take the Q4 activations).
  void MatMulQ4(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                ScratchArena& own) const;

  std::unique_ptr<ThreadPool> pool_;
  Precision precision_;
  const KernelVariant* variant_;
  bool use_onednn_;
  std::unique_ptr<StreamTuner> stream_tuner_;
  // [pool threads]: participant i's arena. Mutable state behind const methods: each arena is
  // used by its participant only (see scratch()).
  std::unique_ptr<ScratchArena[]> arenas_;
};

// Activation rows from which Context::MatMul hands BF16 products to oneDNN (measured: below
// it the own kernel, which streams each weight byte once, is as fast or faster).
inline constexpr int64_t kOneDnnMinRows = 32;
// Output columns per single-threaded oneDNN call (the pool spreads the blocks); 256 and 512
// measured the same, 256 balances the o/down projections (N 2048) over more chunks.
inline constexpr int64_t kOneDnnCols = 256;
// Most activation rows per single-threaded oneDNN call on BF16 blocked weights (row blocks;
// each call reads all the weights, which at 128 rows is still far from memory-bound).
inline constexpr int64_t kOneDnnRows = 128;

// AVX2 + FMA + F16C, for CPUs without AVX-512 (kernels/avx2_internal.h; null when the build
// is not for x86-64).
const KernelVariant* Avx2Variant();
// The AVX-512 variants (defined in their own files, compiled with their -m flags; null when
// the build has no x86-64 AVX-512 support).
const KernelVariant* Avx512Variant();
const KernelVariant* Avx512VnniVariant();  // "avx512" + Q8 kernels (AVX512-VNNI)
const KernelVariant* Avx512Bf16Variant();
// "avx512bf16" with the BF16 blocked matmuls on avx512's f32 FMA kernel (the weights widened
// from BF16, the activations rounded to BF16 as everywhere) at every row count, never oneDNN:
// on CPUs whose vdpbf16ps is slow (ADR 0031) it is the faster of the two; DefaultVariant
// chooses between them by measuring (kernels/gemm_probe.h).
const KernelVariant* Avx512Bf16FmaVariant();

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_DISPATCH_H_
