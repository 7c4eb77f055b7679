// The vision tower's weights: `model.visual.*` of a Qwen3-VL checkpoint, bound by name and
// exact shape (VisionWeights, views into the mapped checkpoint as stored), and the same
// converted once at load for the kernels (PreparedVisionWeights).
//
// HF names (docs/contracts.md §D.2, modeling_qwen3_vl.py Qwen3VLVisionModel), Dv hidden, Iv
// intermediate, m the spatial merge, O the text hidden size:
//   patch_embed.proj.weight [Dv, C, Tp, P, P] (read as [Dv, C·Tp·P·P]), .bias [Dv]
//   pos_embed.weight [G², Dv]
//   blocks.{j}.norm1/norm2.{weight,bias} [Dv]
//   blocks.{j}.attn.qkv.weight [3Dv, Dv], .bias [3Dv]; attn.proj.weight [Dv, Dv], .bias [Dv]
//   blocks.{j}.mlp.linear_fc1.weight [Iv, Dv], .bias [Iv]; linear_fc2.weight [Dv, Iv], .bias [Dv]
//   merger.norm.{weight,bias} [Dv]; deepstack_merger_list.{k}.norm.{weight,bias} [m²Dv]
//   (merger | deepstack_merger_list.{k}).linear_fc1.weight [m²Dv, m²Dv], .bias [m²Dv]
//   (merger | deepstack_merger_list.{k}).linear_fc2.weight [O, m²Dv], .bias [O]
#ifndef VLSTACK_VISION_VISION_WEIGHTS_H_
#define VLSTACK_VISION_VISION_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/memory.h"
#include "base/status.h"
#include "io/safetensors.h"
#include "kernels/dispatch.h"
#include "model/fp8_weights.h"
#include "model/prepared_weights.h"
#include "vision/vision_config.h"

namespace vls {

inline constexpr const char* kVisionWeightPrefix = "model.visual.";

// A Linear layer's or LayerNorm's parameters as stored: dense F32/BF16/F16 matrices (a vector
// is a [1, n] matrix) pointing into the checkpoint mapping. A Linear weight of an FP8
// checkpoint may instead be F8_E4M3 codes with block scales (model/fp8_weights.h); only
// PreparedVisionWeights::Prepare and WidenVisionWeight read those (dequantized).
struct VisionRawLinear {
  kernels::Matrix w;     // [out, in]
  kernels::Matrix b;     // [1, out]
  Fp8BlockScales w_fp8;  // w's block scales when w is F8_E4M3
};
struct VisionRawNorm {
  kernels::Matrix w;  // [1, n]
  kernels::Matrix b;  // [1, n]
};
struct VisionRawBlock {
  VisionRawNorm norm1, norm2;
  VisionRawLinear qkv;   // [3Dv, Dv]: rows q (heads × hd), then k, then v
  VisionRawLinear proj;  // [Dv, Dv]
  VisionRawLinear fc1;   // [Iv, Dv]
  VisionRawLinear fc2;   // [Dv, Iv]
};
struct VisionRawMerger {
  VisionRawNorm norm;   // [Dv] main merger, [m²Dv] DeepStack mergers
  VisionRawLinear fc1;  // [m²Dv, m²Dv]
  VisionRawLinear fc2;  // [O, m²Dv]
};
struct VisionWeights {
  VisionRawLinear patch;  // [Dv, patch_dim]
  kernels::Matrix pos;    // [G², Dv]
  std::vector<VisionRawBlock> blocks;
  VisionRawMerger merger;
  std::vector<VisionRawMerger> deepstack;  // [K]
};

// Binds every model.visual.* tensor of `ckpt` for `cfg`: each must exist (NotFound naming it),
// be F32, BF16 or F16 with exactly the expected shape (InvalidArgument naming the tensor, the
// expected and the found shape), and no other model.visual.* tensor may exist (InvalidArgument
// naming it). The Linear weights of the blocks and mergers may be F8_E4M3 under cfg.fp8, each
// with its `.weight_scale_inv` (the rules of model/fp8_weights.h; the patch embedding is a
// convolution and never FP8). The views stay valid while `ckpt` lives.
StatusOr<VisionWeights> BindVisionWeights(const VisionConfig& cfg,
                                          const SafetensorsCheckpoint& ckpt);

// l.w as f32 values [out · in] (dequantized when FP8; a NaN code gives NaN), for the scalar
// reference (VisionModel::ReferenceEncode).
std::vector<float> WidenVisionWeight(const VisionRawLinear& l);

// A prepared Linear: the matrix in the precision's storage (see below) and its bias in f32.
struct VisionLinear {
  kernels::Matrix w;         // [out, in]
  const float* b = nullptr;  // [out]
};
struct VisionNorm {
  const float* w = nullptr;  // [n]
  const float* b = nullptr;  // [n]
};
struct VisionBlock {
  VisionNorm norm1, norm2;
  VisionLinear qkv, proj, fc1, fc2;
};
struct VisionMerger {
  VisionNorm norm;
  VisionLinear fc1, fc2;
};

// The prepared layout, in region order: every matrix (4 KiB aligned; storage by precision, see
// below) and then every f32 vector (biases, norms, the position table; 64-byte aligned). Entry
// names are the tensor names without "model.visual.".
std::vector<PreparedEntry> PlanPreparedVisionEntries(const VisionWeights& w,
                                                     kernels::Precision precision);
// One line per entry ("visual.<name> <storage> [rows, cols] @offset"), for the artifact
// identity.
std::string PreparedVisionLayoutText(const std::vector<PreparedEntry>& entries);
// OK when `have` equals `want` entry for entry; otherwise InvalidArgument naming `what`, the
// first entry that differs and what was expected there.
Status CheckPreparedVisionLayout(const std::vector<PreparedEntry>& have,
                                 const std::vector<PreparedEntry>& want, const std::string& what);

// Weights converted once at load, like the text decoder's (model/prepared_weights.h), into one
// region laid out by PlanPreparedVisionEntries. Matrix storage by ctx.precision(): kF32 the
// checkpoint's dtype, bytes unchanged (widened to f32 in the kernels, so the path stays exact;
// an FP8 weight is dequantized to F32, exactly as model/fp8_weights.h says);
// kBF16 BF16 blocked (kernels/bf16_blocked.h); kInt8 Q8 (kernels/quant.h). Biases, norms and
// the position table are widened to f32. The region is either prepared here or a prepared
// artifact's vision section mapped back (FromRegion).
// Thread safety: immutable after Prepare / FromRegion.
class PreparedVisionWeights {
 public:
  // `release_source_pages`: drop each source tensor's resident pages once it is copied
  // (base/memory.h ReleaseFilePages), so preparing never holds both copies of the tower.
  // REQUIRES then: every source tensor lies in a read-only file mapping (a checkpoint).
  static StatusOr<std::unique_ptr<PreparedVisionWeights>> Prepare(
      const VisionConfig& cfg, const VisionWeights& w, const kernels::Context& ctx,
      bool release_source_pages = false);
  // Binds a region prepared before (a mapped artifact's vision section; region.owner keeps it
  // alive). Refused (InvalidArgument naming `what` and the first difference) unless its
  // entries are exactly PlanPreparedVisionEntries(w, precision) and lie inside the region.
  static StatusOr<std::unique_ptr<PreparedVisionWeights>> FromRegion(const VisionWeights& w,
                                                                     kernels::Precision precision,
                                                                     PreparedRegion region,
                                                                     const std::string& what);

  const VisionLinear& patch() const { return patch_; }
  const float* pos() const { return pos_; }  // [G², Dv]
  const VisionBlock& block(int j) const { return blocks_[static_cast<size_t>(j)]; }
  const VisionMerger& merger() const { return merger_; }
  const VisionMerger& deepstack(int k) const { return deepstack_[static_cast<size_t>(k)]; }
  // Bytes of the prepared matrices and f32 vectors (without alignment padding).
  uint64_t bytes() const;
  // PreparedVisionLayoutText(entries()).
  std::string LayoutText() const;
  const std::vector<PreparedEntry>& entries() const { return region_.entries; }
  // The region (entries, bytes and owner), e.g. for the artifact writer.
  const PreparedRegion& region() const { return region_; }

 private:
  friend std::vector<PreparedEntry> PlanPreparedVisionEntries(const VisionWeights& w,
                                                              kernels::Precision precision);
  PreparedVisionWeights() = default;
  struct Job;
  // Every prepared tensor in region order, each with the member it binds to.
  std::vector<Job> Jobs(const VisionWeights& w);
  // Points the members at the entries of region_ (which equal the plan of `jobs`).
  void Bind(const std::vector<Job>& jobs);

  std::unique_ptr<HugeRegion> owned_;  // the region when prepared here
  PreparedRegion region_;
  VisionLinear patch_;
  const float* pos_ = nullptr;
  std::vector<VisionBlock> blocks_;
  VisionMerger merger_;
  std::vector<VisionMerger> deepstack_;
};

}  // namespace vls

#endif  // VLSTACK_VISION_VISION_WEIGHTS_H_
