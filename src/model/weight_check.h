// Finite-value checks of checkpoint weights (ModelOptions::check_weights): a NaN or infinite
// weight makes every logit it reaches NaN, and the model then answers garbage, so a load that
// checks refuses it naming the tensor and the element.
//
// The matrices PreparedWeights::Prepare converts are checked chunk by chunk inside that pass
// (each chunk is scanned right before it is converted, while its pages are resident), so the
// check reads nothing the load does not read anyway; CheckUnpreparedWeights covers the rest.
#ifndef VLSTACK_MODEL_WEIGHT_CHECK_H_
#define VLSTACK_MODEL_WEIGHT_CHECK_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "kernels/dispatch.h"
#include "model/qwen3_config.h"
#include "model/qwen3_weights.h"
#include "tensor/dtype.h"

namespace vls {

// The first NaN or infinite element among `n` consecutive elements of dtype `dtype` at `data`.
struct NonFiniteElement {
  int64_t index = 0;  // from `data`, in elements
  bool nan = false;   // else an infinity
};
// F32, BF16 and F16 are scanned (one vectorisable pass over the exponent bits); any other dtype
// (I32, F8_E4M3, whose NaN codes model/fp8_weights.h refuses) has no non-finite value here.
std::optional<NonFiniteElement> FindNonFinite(DType dtype, const void* data, int64_t n);

// DataLoss: "tensor '<name>' has a NaN at element <index> (row r, column c) ...". `cols` > 0
// adds the row and column of a matrix.
Status NonFiniteWeightError(const std::string& tensor, const NonFiniteElement& e, int64_t cols);

// The weights Prepare does not read: the norm vectors (already converted to f32 by
// BindQwen3Weights) and, when the LM head is not tied to it, the embedding matrix (looked up
// row by row later; scanned here over ctx's pool in chunks whose file pages are released after,
// as Prepare does). The first offender's DataLoss (NonFiniteWeightError).
Status CheckUnpreparedWeights(const Qwen3Config& cfg, const Qwen3Weights& w,
                              const kernels::Context& ctx);

}  // namespace vls

#endif  // VLSTACK_MODEL_WEIGHT_CHECK_H_
