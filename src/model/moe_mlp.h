// The sparse MLP of a mixture-of-experts layer (ADR 0027; the math is MoeConfig's):
//
//   logits[M, E] = m · routerᵀ                   (f32, the router prepared as F32)
//   experts[M, k], w[M, k] = RouteTopK(logits)   (softmax over all E, top k, renormalised)
//   out[r] = Σ_j w[r, j] · Down_e(SiLU(Gate_e(m[r])) · Up_e(m[r])),  e = experts[r, j]
//
// Rows are grouped by expert (a counting sort, rows in ascending order within an expert), each
// used expert's rows gathered into one contiguous block (quantized experts: each row of m
// quantized once, its quantized form gathered, GroupedProduct::rows), and the experts' products
// run as one Context::MatMulGrouped for gate_up and one for down. Each row's sum is taken over j in
// ascending order by one thread, so a row's result depends only on the row and on what each
// matmul gives that row: not on the thread timing, nor on which other rows share the pass.
#ifndef VLSTACK_MODEL_MOE_MLP_H_
#define VLSTACK_MODEL_MOE_MLP_H_

#include <cstdint>
#include <functional>

#include "kernels/dispatch.h"
#include "model/prepared_weights.h"
#include "model/qwen3_config.h"

namespace vls {

// Called once per MoeMlp call with the routing of its M rows: experts[M, k] (descending
// weight) and weights[M, k], before the experts run.
using MoeRoutingCallback = std::function<void(const int32_t* experts, const float* weights)>;

// The scratch floats MoeMlp needs for M rows (its int32 arrays counted as floats): the router
// logits [M, E], the routing and index arrays [M, k] each, and the gathered rows
// [M·k, H + 3·I_e] (the input rows, then the down outputs; gate|up; the activations).
int64_t MoeScratchFloats(const MoeConfig& moe, int64_t H, int64_t M);

// out[M, H] = the sparse MLP of m[M, H] with layer `P`'s router and experts (out may alias m;
// it is written after m has been read). `scratch`: MoeScratchFloats(moe, H, M) floats, 64-byte
// aligned. `on_routing` may be empty. Runs over ctx's pool.
void MoeMlp(const kernels::Context& ctx, const MoeConfig& moe, const PreparedLayer& P,
            const float* m, int64_t M, int64_t H, float* scratch, float* out,
            const MoeRoutingCallback& on_routing);

}  // namespace vls

#endif  // VLSTACK_MODEL_MOE_MLP_H_
