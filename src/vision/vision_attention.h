// The vision tower's bidirectional attention as BF16 GEMMs (the kBF16 and kInt8 paths of
// VisionModel::Encode): per image segment, head and block of query rows, scores = Q·Kᵀ and
// out = P·V through oneDNN's BF16 matmul (f32 accumulation; AMX where the CPU has it), the
// softmax in f32 between them. Q, K and V are rounded to BF16 once per layer (PackHeadsBf16);
// the probabilities are rounded to BF16 for P·V and normalised by the sum of the rounded
// values, so the weights applied sum to one. Memory: one [rows, L] f32 score block and its
// BF16 copy per thread (L the segment length), never [L, L].
//
// The f32 path keeps the f32 blocked kernel (kernels/attention.h): this one is within BF16
// rounding of it (vision_model_test.cc checks both against the reference).
#ifndef VLSTACK_VISION_VISION_ATTENTION_H_
#define VLSTACK_VISION_VISION_ATTENTION_H_

#include <cstdint>
#include <span>

#include "base/status.h"
#include "kernels/dispatch.h"

namespace vls::vision_internal {

// Query rows per work item of GemmAttention, and most keys per block: a work item runs one
// oneDNN call for Q·Kᵀ and one for P·V per key block, with online softmax across the blocks
// (running max and sum, the accumulated output rescaled), so its working set stays in L2:
// [rows, keys] f32 scores and their BF16 copy, ~0.75 MB.
inline constexpr int64_t kGemmAttentionRows = 128;
inline constexpr int64_t kGemmAttentionKeys = 1024;
// The key block of a segment of L keys: L split into equal blocks of at most
// kGemmAttentionKeys (the last one shorter by less than the block count).
int64_t KeyBlock(int64_t L);

// True when GemmAttention can run on `ctx`: an AVX-512 variant and oneDNN's BF16 matmul
// (OneDnnBf16Available), in a build with the vision AVX-512 loops.
bool GemmAttentionAvailable(const kernels::Context& ctx);

// Per-head BF16 operands of one layer, laid out for the GEMMs:
//   q, k [heads, Np, hd] row-major;
//   vt   per (head, segment, key block [k0, k0 + lk) of KeyBlock) the block [hd, lk] (V
//        transposed) at h·Np·hd + hd·(seg_begin + k0).
struct HeadsBf16 {
  uint16_t* q = nullptr;
  uint16_t* k = nullptr;
  uint16_t* vt = nullptr;
};

// Adds the bias b [3·Dv] to qkv [Np, 3·Dv] (q | k | v, heads × hd each; qkv is not
// modified), rotates q and k by the 2-D rotary cos/sin [Np, hd/2] (ctx.ApplyRope) and rounds
// them into `out`, all in one pass over each row. `segments`: cu_seqlens
// (PatchLayout::segments).
void PackHeadsBf16(const float* qkv, const float* b, const float* cos, const float* sin, int64_t np,
                   int64_t heads, int64_t hd, std::span<const int64_t> segments,
                   const HeadsBf16& out, const kernels::Context& ctx);

// One row of PackHeadsBf16 (vision_avx512.cc; REQUIRES AVX-512F): q and k heads of row + b
// rotated and rounded to q/k + h·head_stride, v = BF16(row + b) [Dv] contiguous.
void PackRowAvx512(const float* row, const float* b, const float* cos, const float* sin,
                   int64_t heads, int64_t hd, int64_t head_stride, uint16_t* q, uint16_t* k,
                   uint16_t* v);

// out[Np, heads·hd] = per segment, per head softmax(scale · Q·Kᵀ) · V over the pool.
// REQUIRES: GemmAttentionAvailable(ctx). Errors: what oneDNN reports (kInternal).
Status GemmAttention(const HeadsBf16& in, int64_t np, int64_t heads, int64_t hd,
                     std::span<const int64_t> segments, float scale, float* out,
                     const kernels::Context& ctx);

// The row steps between the GEMMs (vision_avx512.cc; REQUIRES: AVX-512F, n >= 1): the max of
// s[n]; p[n] = BF16(exp(scale·(s[n] − max))) returning Σ p (of the rounded values).
float RowMaxAvx512(const float* s, int64_t n);
float ExpRowToBf16Avx512(const float* s, int64_t n, float scale, float max, uint16_t* p);
// Their scalar references (the test compares the two).
float RowMax(const float* s, int64_t n);
float ExpRowToBf16(const float* s, int64_t n, float scale, float max, uint16_t* p);

}  // namespace vls::vision_internal

#endif  // VLSTACK_VISION_VISION_ATTENTION_H_
