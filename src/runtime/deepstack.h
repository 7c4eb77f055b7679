// DeepStack: the compact request-owned payload, its validation layers, and the residual hook.
//
// Semantics (docs/contracts.md §2): after decoder layer l has fully finished, if l ==
// layer_indices[k], add layer_features[k, v, :] to residual row visual_positions[v] for every v <
// Nv. Only prefill sees DeepStack; no dense [L,S,H] or [S,Nmax,H] buffer is ever built.
//
// Every failure is a Status whose message starts with "deepstack.<rule>:" and names the
// tensor, so callers (and tests) can tell the rules apart.
#ifndef VLSTACK_RUNTIME_DEEPSTACK_H_
#define VLSTACK_RUNTIME_DEEPSTACK_H_

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/qwen3_config.h"
#include "model/qwen3_model.h"
#include "tensor/tensor.h"

namespace vls {

// The rules, in the order they are checked. Names appear in error messages.
enum class DeepStackRule {
  kDType,                // 1: dtypes i32 / f32 / i32
  kRank,                 // 1: ranks 1 / 3 / 1
  kEmptyLayerSet,        // 1: K > 0
  kShape,                // 1: features [K, Nv, H>0]
  kByteCount,            // 1: bytes == product(shape) × 4, overflow-checked
  kPositionsNotSorted,   // 2: strictly increasing (checked before range)
  kPositionOutOfRange,   // 2: every position in [0, S)
  kVisualCountMismatch,  // 2: declared visual tokens == Nv; pad-token positions match
  kNegativeLayer,        // 2: every layer index >= 0
  kNonFiniteFeature,     // 2: every feature finite
  kStaticMaxOverflow,    // 3: Nv <= Nmax
  kHiddenMismatch,       // 3: feature H == model H
  kLayerContract,        // 3: layer_indices == the model's target layers
  kPositionMode,         // 3: request mode == model mode
  kNotDeclared,          // 3: the model has no DeepStack entry
};
const char* DeepStackRuleName(DeepStackRule rule);  // e.g. "positions_not_sorted"
Status DeepStackError(DeepStackRule rule, const std::string& detail);
// The rule a DeepStack error names, or nullopt for other statuses.
std::optional<DeepStackRule> DeepStackRuleOf(const Status& status);

// Owns its three tensors (copied in at construction), so a queued request keeps them alive
// and cancelling it frees them.
class DeepStackPayload {
 public:
  // Validation layer 1: shape and type only; no model knowledge. Nv = 0 is valid.
  static StatusOr<DeepStackPayload> Create(const TensorView& visual_positions,
                                           const TensorView& layer_features,
                                           const TensorView& layer_indices);

  int64_t num_visual() const { return positions_.shape()[0]; }      // Nv
  int64_t num_layers() const { return layer_indices_.shape()[0]; }  // K
  int64_t hidden() const { return features_.shape()[2]; }           // H
  std::span<const int32_t> positions() const {
    return {positions_.i32(), static_cast<size_t>(num_visual())};
  }
  std::span<const int32_t> layer_indices() const {
    return {layer_indices_.i32(), static_cast<size_t>(num_layers())};
  }
  // [Nv, H] features of level k.
  const float* features(int64_t k) const { return features_.f32() + k * num_visual() * hidden(); }
  size_t bytes() const {
    return positions_.nbytes() + features_.nbytes() + layer_indices_.nbytes();
  }

  // The payload of the sequence rows [begin, end) as a pass over just those rows sees it: the
  // visual positions inside the range, rebased by -begin, and exactly their feature rows at
  // every level (chunked prefill). A validated payload gives a validated slice.
  DeepStackPayload Slice(int64_t begin, int64_t end) const;

 private:
  HostTensor positions_;      // i32 [Nv]
  HostTensor features_;       // f32 [K, Nv, H]
  HostTensor layer_indices_;  // i32 [K]
};

// What a request says about itself, for validation layer 2.
struct DeepStackRequestFacts {
  int64_t sequence_length = 0;                        // S after placeholder expansion
  std::optional<std::span<const int32_t>> token_ids;  // when the request carries ids
  std::optional<int64_t> declared_visual_tokens;      // when it declares a count without ids
  int32_t image_token_id = -1;
  int32_t video_token_id = -1;
};

// Validation layer 2: request semantics (sorted then in range, visual-token count, layer >= 0,
// finite features).
Status ValidateDeepStackRequest(const DeepStackPayload& p, const DeepStackRequestFacts& facts);

// Validation layer 3: against the loaded model (Nv <= Nmax, H, exact layer contract, mode).
Status ValidateDeepStackForModel(const DeepStackPayload& p, const Qwen3Config& cfg, int nmax,
                                 PositionMode request_mode);

// The production hook: a sparse residual add at the visual rows, cost K·Nv·H.
// REQUIRES: payload validated against the model; rows of the pass are sequence rows 0..S-1.
class DeepStackHook : public LayerHook {
 public:
  explicit DeepStackHook(const DeepStackPayload& payload, int64_t hidden)
      : payload_(payload), hidden_(hidden) {}
  void AfterLayer(int layer, float* x, int64_t M) override;

 private:
  const DeepStackPayload& payload_;
  int64_t hidden_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_DEEPSTACK_H_
