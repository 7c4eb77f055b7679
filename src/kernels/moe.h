// Mixture-of-experts primitives (ADR 0027): top-k routing and grouped expert products.
#ifndef VLSTACK_KERNELS_MOE_H_
#define VLSTACK_KERNELS_MOE_H_

#include <cstdint>

namespace vls::kernels {

// Per row m of logits[M, E]: p = softmax(logits[m]) in f32 (max subtracted, exp, divided by
// the sum); experts[m, 0..k) = the k largest p in descending order, ties to the lower expert id
// (the order torch.topk gives for distinct values; equal values are ordered by id here, a rule
// the oracle shares); weights[m, j] = p[experts[m, j]], divided by their sum when `normalize`.
// A row whose logits are not all finite gets experts 0..k-1 and weights NaN (callers that
// check for non-finite values see it). REQUIRES: 1 <= k <= E.
void RouteTopK(const float* logits, int64_t M, int64_t E, int k, bool normalize, int32_t* experts,
               float* weights);

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_MOE_H_
