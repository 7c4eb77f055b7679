// A model loaded for serving: weights, static bounds, entries and the artifact identity.
#ifndef VLSTACK_RUNTIME_LOADED_MODEL_H_
#define VLSTACK_RUNTIME_LOADED_MODEL_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/pool_pacer.h"
#include "base/status.h"
#include "model/qwen3_model.h"
#include "runtime/entries.h"
#include "vision/vision_config.h"
#include "vision/vision_weights.h"

namespace vls {

inline constexpr int kAbiVersion = 1;

// The documented maxima of the load bounds (InvalidArgument beyond them). Within them a load is
// still refused (ResourceExhausted, with the bytes it would need and those available) when the
// KV caches of every slot and the working buffers do not fit in the memory the process can
// have (base/memory.h: MemAvailable and the address-space limit, whichever is smaller).
inline constexpr int kMaxCapacity = 1 << 24;  // positions per sequence
inline constexpr int kMaxSlots = 4096;

struct LoadOptions {
  int capacity = 4096;  // C: per-sequence context capacity, in [1, kMaxCapacity]
  int slots = 1;        // B: batch slots, in [1, kMaxSlots]
  // Nmax for DeepStack. 0: the config's deepstack_max_visual_positions, else the capacity.
  // When the config states Nmax, a different non-zero value here is refused.
  int nmax = 0;
  int threads = 0;  // kernel thread pool size, at most kMaxThreads; 0: all cores
  // Matmul precision: kF32 (exact path; forward and the oracle tests) or kBF16 (fast path).
  kernels::Precision precision = kernels::Precision::kF32;
  PrepareProgress progress;  // called while weights are prepared (may be empty)
  // A prepared-weights artifact from `vlstack compile` to map instead of preparing. Refused
  // unless its identity equals this load's identity (same checkpoint, config, precision and
  // bounds) and, for a model with a vision tower, it holds the tower's prepared weights in the
  // layout this load plans (the ImageEncoder then maps them instead of preparing them).
  std::string artifact;
  // Whether the artifact is copied into huge pages or served from its mapping (ADR 0033).
  ArtifactMemory artifact_memory = ArtifactMemory::kCopy;
  // KV cache element type; unset: f32 at kF32, BF16 otherwise (ModelOptions::kv_dtype).
  std::optional<KvDType> kv_dtype;
  // Bytes of the batch engine's KV pool (paged KV memory, model/kv_pool.h): blocks of
  // kKvBlockKeys positions shared by the slots, each sequence holding only the blocks of the
  // positions it has written. 0: what the slots need at full capacity (slots · C positions) when
  // that fits the memory left after the weights and the working buffers, else 90 % of that
  // memory (at least one sequence of capacity C). A given size is refused when it does not fit.
  uint64_t kv_memory = 0;
  // The same as a count of positions (rounded up to whole blocks); set at most one of the two.
  int64_t kv_tokens = 0;
  // Positions per block of the pool: one of kKvBlockKeyChoices (model/kv_pool.h).
  int kv_block_keys = kKvBlockKeys;
  // Refuse a checkpoint with a NaN or infinite weight, naming the tensor and the element
  // (ModelOptions::check_weights). Off here; the CLI turns it on (--check-weights).
  bool check_weights = false;
};

// Thread safety: immutable after Load except the lazily computed identity (guarded).
class LoadedModel {
 public:
  // Checks the options against the maxima above and the memory of the bounds (before the
  // weights are read, and again after), then loads.
  static StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& dir,
                                                     const LoadOptions& options);

  const Qwen3Model& model() const { return *model_; }
  const Qwen3Config& config() const { return model_->config(); }
  const StaticBounds& bounds() const { return bounds_; }
  // Blocks of kKvBlockKeys positions in the batch engine's KV pool (LoadOptions::kv_memory), and
  // how the size was chosen ("--kv-memory", "the slots at full capacity", "90 % of the memory
  // left": for the serve banner).
  int64_t kv_pool_blocks() const { return kv_pool_blocks_; }
  int kv_block_keys() const { return kv_block_keys_; }
  const std::string& kv_pool_reason() const { return kv_pool_reason_; }
  const EntrySet& entries() const { return entries_; }
  // Shares the model's thread pool between the batch engine's steps (the foreground) and the
  // image encoder's work (the background) so that streams keep their pace while a picture is
  // encoded (base/pool_pacer.h, ADR 0030). Thread-safe; mutable through a const model.
  PoolPacer& pacer() const { return *pacer_; }
  bool has_deepstack() const { return config().deepstack.has_value(); }

  // The vision tower, when the model has one: config.json's vision_config parses
  // (LoadVisionConfig) and every model.visual.* tensor binds to it (BindVisionWeights). A
  // folder whose vision tower is absent or broken serves text as before (its identity has no
  // vision sections; the ImageEncoder reports what is wrong when images are asked for).
  const std::optional<VisionConfig>& vision_config() const { return vision_config_; }
  // The vision tower's prepared layout at this load's precision (PlanPreparedVisionEntries);
  // empty without a vision tower.
  const std::vector<PreparedEntry>& vision_layout() const { return vision_layout_; }
  // The vision weights mapped from the artifact this model was loaded with (views that keep
  // the mapping alive), checked against vision_layout(); nullptr when the model was not loaded
  // from an artifact or has no vision tower.
  StatusOr<std::unique_ptr<PreparedVisionWeights>> MappedVisionWeights() const;

  // The canonical serialization the identity hashes (docs/contracts.md §1), and its SHA-256 in hex.
  // The first call hashes every weight's bytes (a few seconds for a 2B model).
  std::string IdentityText() const;
  const std::string& Identity() const;

  // The read bandwidth (bytes/s) of the model's threads over its own prepared weights, the
  // best of 2 passes (kernels/read_bandwidth.h): the memory roof a decode step is measured
  // against (`vlstack bench`).
  double PreparedReadBandwidth() const;

  // Writes the prepared weights as an artifact (model/prepared_artifact.h) that a load with
  // the same checkpoint, precision and bounds can map back via LoadOptions::artifact; with a
  // vision tower its prepared weights too (prepared here, over the model's context, unless
  // this model was loaded from an artifact). `progress` counts written chunks (may be empty).
  Status WriteArtifact(const std::string& path, const PrepareProgress& progress) const;

 private:
  LoadedModel() = default;
  // Sets the vision_* members when `dir` holds a vision tower (see vision_config()).
  void FindVisionTower(const std::string& dir);
  // With an artifact: its vision section is present exactly when the model has a vision
  // tower, and then lies in vision_layout() (FailedPrecondition / InvalidArgument otherwise).
  Status CheckArtifactVision() const;

  std::unique_ptr<Qwen3Model> model_;
  StaticBounds bounds_;
  int64_t kv_pool_blocks_ = 0;
  int kv_block_keys_ = kKvBlockKeys;
  std::string kv_pool_reason_;
  std::unique_ptr<PoolPacer> pacer_ = std::make_unique<PoolPacer>();
  EntrySet entries_;
  std::string artifact_;  // LoadOptions::artifact
  std::optional<VisionConfig> vision_config_;
  VisionWeights vision_weights_;  // views into model_->checkpoint()
  std::vector<PreparedEntry> vision_layout_;
  mutable std::once_flag identity_once_;
  mutable std::string identity_;
};

// Hex SHA-256 of bytes (OpenSSL).
std::string Sha256Hex(const void* data, size_t size);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_LOADED_MODEL_H_
