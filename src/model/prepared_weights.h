// Weights converted once at load into the layout the kernels want, in one owned region.
//
// Per layer the Q, K and V projections are stacked into one matrix (one matmul, one pass over
// the activations, one thread-pool dispatch instead of three) and so are the MLP's gate and up
// projections; O, down and the LM head are copied as they are. Every matrix starts on a
// 4 KiB boundary of a 2 MiB-aligned huge-page region (base/memory.h).
//
// A sparse layer (ADR 0027) has, in place of gate_up and down, its router (dense F32 in every
// precision) and per expert e a gate_up [2·I_e, H] and a down [H, I_e] stored as the dense
// MLP's. From the per-expert layout they are prepared as the dense MLP is; from the fused
// layout each expert's block is transposed (in tiles, a few MiB at a time, into f32) and then
// converted, one expert at a time, its file pages released after it: no whole layer's experts
// are ever held twice.
//
// Storage dtype by precision:
//   kF32:  the checkpoint's dtype, bytes unchanged (the f32 path stays exact); a stacked matrix
//          whose parts differ in dtype is widened to F32 (exact).
//   kBF16: BF16 blocked (kernels/bf16_blocked.h: 64-row × 32-column tiles with column pairs
//          interleaved, oneDNN's own layout), so the decode kernels and oneDNN's prefill GEMM
//          read one copy; F32 and F16 sources are rounded to nearest even once, here.
//   kInt8: Q8 blocked (kernels/quant.h: int8 per 32-column block with an F16 scale), about
//          1.06 bytes per weight; activations are quantized per call.
//   kInt4: Q4 blocked (kernels/q4.h: 4-bit codes with an F16 scale and min per 32 columns,
//          0.625 bytes per weight) for the layers; the LM head (and a matrix whose columns are
//          not a multiple of 32) as Q8 (ADR 0019). Entries read "Q4" (PreparedStorageName).
#ifndef VLSTACK_MODEL_PREPARED_WEIGHTS_H_
#define VLSTACK_MODEL_PREPARED_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/memory.h"
#include "base/status.h"
#include "kernels/dispatch.h"
#include "model/qwen3_config.h"
#include "model/qwen3_weights.h"

namespace vls {

// One prepared matrix: its name, storage and place in the region.
struct PreparedEntry {
  std::string name;           // "layers.<l>.qkv", "layers.<l>.o", "layers.<l>.gate_up",
                              // "layers.<l>.down", "lm_head"; sparse layers:
                              // "layers.<l>.router", "layers.<l>.experts.<e>.gate_up",
                              // "layers.<l>.experts.<e>.down"
  DType dtype = DType::kF32;  // the storage dtype (kBF16 for BF16 blocked; kF32, unused, for kQ8)
  kernels::MatrixFormat format = kernels::MatrixFormat::kDense;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t offset = 0;  // from the region start, a multiple of kPreparedAlign
  uint64_t bytes = 0;
};

// "F32"/"BF16"/"F16" for dense entries, kQ8StorageName and "BF16_BLOCKED" for the others; and
// the inverse (false if unknown).
//
// The Q8 name carries the block size (kernels::kQ8Block) and the scale type, which the bytes
// depend on, and it also enters the artifact identity through PreparedWeights::LayoutText.
// Older Q8 layouts are refused by name (PreparedQ8OldLayout): "Q8" was the 128-column layout
// (ADR 0007, addendum), "Q8B32" the 32-column one with f32 scales and i32 weight sums, 40 bytes
// per 32 weights (ADR 0032).
inline constexpr char kQ8StorageName[] = "Q8B32H";
// What an older vlstack's Q8 storage name `name` was (for the error that asks for a new
// compile), or null when it is not one.
const char* PreparedQ8OldLayout(const std::string& name);
std::string PreparedStorageName(const PreparedEntry& e);
bool ParsePreparedStorageName(const std::string& name, PreparedEntry* e);
// The bytes an entry of this storage and shape occupies.
uint64_t PreparedEntryBytes(const PreparedEntry& e);

struct PreparedLayer {
  kernels::Matrix qkv;      // [nh·D + 2·nkv·D, H]: rows of q_proj, then k_proj, then v_proj
  kernels::Matrix o;        // [H, nh·D]
  kernels::Matrix gate_up;  // [2·I, H]: rows of gate_proj, then up_proj (empty when sparse)
  kernels::Matrix down;     // [H, I] (empty when sparse)
  // A sparse layer (Qwen3Config::IsSparseLayer; entries "layers.<l>.router",
  // "layers.<l>.experts.<e>.gate_up", "layers.<l>.experts.<e>.down"). The router is F32 in
  // every precision (widened exactly from the checkpoint: routing never sees rounded weights);
  // the experts take the precision's storage as the dense MLP does, from either layout.
  kernels::Matrix router;                       // [E, H], F32
  std::vector<kernels::Matrix> expert_gate_up;  // E × [2·I_e, H]: gate rows, then up rows
  std::vector<kernels::Matrix> expert_down;     // E × [H, I_e]
};

// Called after each prepared matrix group (an expert's gate_up or down counts as one) with
// (done, total); may print progress.
using PrepareProgress = std::function<void(int done, int total)>;

inline constexpr uint64_t kPreparedAlign = 4096;

// Where the prepared weights of an artifact live once loaded (ADR 0033).
enum class ArtifactMemory : uint8_t {
  // Read into anonymous memory on transparent huge pages, as weights prepared at load are. A
  // mapped file has 4 KiB pages, and the 1-3 MB expert products of a mixture-of-experts decode
  // read at half the bandwidth from them (a page walk and a restarted hardware prefetch every
  // 4 KiB).
  kCopy,
  // Served from the file mapping: processes loading the same artifact share its pages in the
  // page cache (replicas on one machine), at that cost in decode speed.
  kMap,
};

// A prepared region beside the text decoder's (the vision tower's, vision/vision_weights.h) as
// the artifact writes and maps it: its entries, its bytes and what keeps them alive.
struct PreparedRegion {
  std::vector<PreparedEntry> entries;
  const std::byte* data = nullptr;
  uint64_t size = 0;
  std::shared_ptr<const void> owner;  // the mapping or allocation; may be empty
};

// The entries Prepare makes for this config, checkpoint and precision, in region order.
std::vector<PreparedEntry> PlanPreparedEntries(const Qwen3Config& cfg, const Qwen3Weights& w,
                                               kernels::Precision precision);

// What the prepared text weights weigh (vlstack inspect, bench): every entry; the experts'
// entries of the sparse layers; and the bytes one token's forward reads, the non-expert
// entries plus k/E of each sparse layer's experts (a token reads its k experts of E).
struct PreparedBytes {
  uint64_t total = 0;
  uint64_t experts = 0;
  uint64_t active_per_token = 0;
};
PreparedBytes CountPreparedBytes(const Qwen3Config& cfg, const std::vector<PreparedEntry>& entries);

// Thread safety: immutable after construction.
class PreparedWeights {
 public:
  // Converts `w` (views into the checkpoint) over ctx's pool. Each source tensor's file pages
  // are released once copied, so peak memory stays near one copy of the weights. With
  // `check_finite` every chunk of a source is scanned right before it is converted and a NaN or
  // infinite weight refuses the load (DataLoss naming the tensor and the element,
  // model/weight_check.h).
  static StatusOr<std::unique_ptr<PreparedWeights>> Prepare(const Qwen3Config& cfg,
                                                            const Qwen3Weights& w,
                                                            const kernels::Context& ctx,
                                                            const PrepareProgress& progress,
                                                            bool check_finite = false);

  // Loads a prepared-weights artifact (model/prepared_artifact.h) written for this config,
  // checkpoint and precision: `memory` says whether its bytes are copied into huge pages or
  // served from the file mapping. Refused (naming the file and the first difference) when its
  // layout is not exactly PlanPreparedEntries(cfg, w, precision), or when its bytes do not
  // match the checksum. The caller checks the artifact identity against the checkpoint's
  // (artifact_identity()).
  static StatusOr<std::unique_ptr<PreparedWeights>> FromArtifact(
      const std::string& path, const Qwen3Config& cfg, const Qwen3Weights& w,
      kernels::Precision precision, ArtifactMemory memory = ArtifactMemory::kCopy);

  // The identity recorded in the artifact this was mapped from; empty when prepared here.
  const std::string& artifact_identity() const { return artifact_identity_; }
  // "capacity C, slots B, nmax N" from the artifact header; empty when prepared here.
  const std::string& artifact_bounds() const { return artifact_bounds_; }
  // The artifact's vision section (entries as recorded, not yet checked against a vision
  // tower; owner keeps the mapping alive); nullopt when prepared here or the artifact has none.
  const std::optional<PreparedRegion>& artifact_vision() const { return artifact_vision_; }
  const PreparedLayer& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  const kernels::Matrix& lm_head() const { return lm_head_; }
  const std::vector<PreparedEntry>& entries() const { return entries_; }
  // The region holding every entry: [0, size()) (an artifact's vision section not included).
  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The bytes of the region that huge pages back now (HugeRegion::HugePageBytes); 0 when it is
  // served from an artifact's file mapping.
  uint64_t HugePageBytes() const;
  // One line per entry ("name dtype [rows, cols] @offset"), for the artifact identity.
  std::string LayoutText() const;

 private:
  PreparedWeights() = default;
  // Points the layer and head matrices at the entries in [data_, data_ + size_).
  Status BindEntries(const Qwen3Config& cfg);

  std::unique_ptr<HugeRegion> region_;               // prepared in this process, or
  std::shared_ptr<const MappedFile> file_;           // mapped from an artifact (kMap), or
  std::shared_ptr<const HugeRegion> artifact_copy_;  // copied from one (kCopy)
  std::string artifact_identity_;
  std::string artifact_bounds_;
  std::optional<PreparedRegion> artifact_vision_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  std::vector<PreparedEntry> entries_;
  std::vector<PreparedLayer> layers_;
  kernels::Matrix lm_head_;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_PREPARED_WEIGHTS_H_
