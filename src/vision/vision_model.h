// The Qwen3-VL vision tower (Qwen3VLVisionModel, docs/contracts.md §D.2) and its DeepStack mergers
// (§C.1): patch embedding, bilinearly interpolated learned positions, 2-D rotary, `depth`
// pre-norm ViT blocks with attention segmented per image and temporal group, the main merger
// after the last block and one DeepStack merger after each block of deepstack_visual_indexes.
//
// Two implementations of one computation:
//   Encode           the fast path: matmuls through kernels::Context::MatMul in the context's
//                    precision over prepared weights, the blocked AVX-512 attention when the
//                    kernel variant has it, row-parallel LayerNorm / GELU / bias / rotary loops.
//   ReferenceEncode  plain scalar loops in f32 (double accumulators) over the checkpoint's own
//                    weights, whatever the precision: the test oracle of the fast path.
//
// Numerics ("exact math" in f32): the position-embedding weights are computed in double from
// the align_corners grid (r·(G−1)/(h−1)) and rounded to f32, and the four-term sum is in f32;
// HF casts the weights to the table's dtype (bf16 in released checkpoints) and sums there, so
// against HF bf16 this differs by a few bf16 ulps of the position embedding. Rotary angles and
// their cos/sin are computed in double and rounded to f32 (HF: f32 angles), q/k rotated in f32.
#ifndef VLSTACK_VISION_VISION_MODEL_H_
#define VLSTACK_VISION_VISION_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "kernels/dispatch.h"
#include "tensor/grid_thw.h"
#include "vision/vision_config.h"
#include "vision/vision_weights.h"

namespace vls {

// Most patch rows one Encode call takes (Σ t·h·w over its grids): 2^17 = twice the 65536
// patches of the largest image the shipped preprocessor makes (16,777,216 pixels / 16²).
// Larger inputs are refused before anything is allocated (InvalidArgument); within the bound
// the working set is checked against the memory available (ResourceExhausted).
inline constexpr int64_t kMaxVisionPatches = int64_t{1} << 17;

struct VisionOutput {
  int64_t tokens = 0;            // Nv = Σ t·h·w / m²
  std::vector<float> embeds;     // [Nv, O] main merger
  std::vector<float> deepstack;  // [K, Nv, O] merger k after block deepstack_visual_indexes[k]
};

// Filled when requested: f32 [Np, Dv] each, rows in the input's (merge-window) order.
struct VisionDiagnostics {
  std::vector<float> patch_embeds;         // patch embedding (with its bias)
  std::vector<float> pos_embeds;           // interpolated position embedding
  std::vector<std::vector<float>> blocks;  // [depth][Np·Dv] output of block j
};

// Thread safety: Encode and ReferenceEncode may be called from several threads; they share
// the context's pool (kernels::Context serialises its loops).
class VisionModel {
 public:
  // Binds model.visual.* of the checkpoint in `dir` (BindVisionWeights: names, dtypes, exact
  // shapes) and prepares the matrices for ctx.precision() (PreparedVisionWeights). `ctx` must
  // outlive the model.
  static StatusOr<std::unique_ptr<VisionModel>> Load(const std::string& dir,
                                                     const VisionConfig& cfg,
                                                     const kernels::Context& ctx);
  // The same with weights prepared before (a prepared artifact's vision section mapped back,
  // runtime/loaded_model.h): binds the checkpoint in `dir` as Load does (ReferenceEncode reads
  // it) and refuses `prepared` (InvalidArgument naming the first difference) unless its layout
  // is PlanPreparedVisionEntries of those weights at ctx.precision().
  static StatusOr<std::unique_ptr<VisionModel>> FromPrepared(
      const std::string& dir, const VisionConfig& cfg, const kernels::Context& ctx,
      std::unique_ptr<PreparedVisionWeights> prepared);

  // pixel_values [rows, patch_dim] f32 in merge-window order (spec §D.4), one grid per item in
  // order. Validates before allocating: grids (tensor/grid_thw.h rules with the merge size),
  // rows == Σ t·h·w <= kMaxVisionPatches, pixel_values.size() == rows · patch_dim, every value
  // finite, the working set within the memory available. `diagnostics` may be null.
  StatusOr<VisionOutput> Encode(std::span<const float> pixel_values, int64_t rows,
                                std::span<const GridThw> grids,
                                VisionDiagnostics* diagnostics) const;
  // The same computation in plain scalar f32 code over the checkpoint weights (tests).
  StatusOr<VisionOutput> ReferenceEncode(std::span<const float> pixel_values, int64_t rows,
                                         std::span<const GridThw> grids,
                                         VisionDiagnostics* diagnostics) const;

  const VisionConfig& config() const { return cfg_; }
  const kernels::Context& context() const { return ctx_; }
  uint64_t weight_bytes() const { return prepared_->bytes(); }
  // The prepared weights' names, storage and shapes (for the artifact identity).
  std::string LayoutText() const { return prepared_->LayoutText(); }

 private:
  VisionModel(VisionConfig cfg, const kernels::Context& ctx) : cfg_(std::move(cfg)), ctx_(ctx) {}

  // The input rules above, and the working set (+ diagnostics) against the memory available;
  // returns Nv.
  StatusOr<int64_t> Validate(std::span<const float> pixel_values, int64_t rows,
                             std::span<const GridThw> grids, bool diagnostics) const;

  VisionConfig cfg_;
  const kernels::Context& ctx_;
  std::unique_ptr<SafetensorsCheckpoint> ckpt_;
  VisionWeights raw_;  // views into ckpt_
  std::unique_ptr<PreparedVisionWeights> prepared_;
};

}  // namespace vls

#endif  // VLSTACK_VISION_VISION_MODEL_H_
