// The Qwen3 / Qwen3-VL text decoder, written top-down like the reference (docs/contracts.md §A.2):
//
//   x = Embed[ids]                               (or caller-supplied embeddings)
//   for each layer l:
//     x = x + Attention(RmsNorm(x))              q/k per-head RMSNorm, then RoPE, GQA, causal
//     x = x + Mlp(RmsNorm(x))                    SwiGLU; in a sparse layer of a MoE model the
//                                                routed experts' SwiGLUs (model/moe_mlp.h)
//     hook(l, x)                                 DeepStack add / diagnostics
//   logits = RmsNorm(x) · W_lmᵀ
#ifndef VLSTACK_MODEL_QWEN3_MODEL_H_
#define VLSTACK_MODEL_QWEN3_MODEL_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "kernels/dispatch.h"
#include "model/kv_cache.h"
#include "model/moe_routing_stats.h"
#include "model/prepared_weights.h"
#include "model/qwen3_config.h"
#include "model/qwen3_weights.h"
#include "model/rope.h"

namespace vls {

// One row of a forward pass: which sequence cache it belongs to, the physical index it is
// written at (it attends to cache rows [0, index]) and its RoPE coordinate. Prefill of S
// tokens is S rows of one cache at indices 0..S-1; a ragged decode step is one row per
// sequence, each with its own cache and length. Causality is on the physical index only.
struct ForwardRow {
  KvCache* cache = nullptr;
  int32_t index = 0;
  RopeCoord coord{0, 0, 0};
};

// Called after each decoder layer has fully finished (attention and MLP residuals added).
class LayerHook {
 public:
  virtual ~LayerHook() = default;
  // x: [M, H] residual rows of this pass, in row order. May modify x.
  virtual void AfterLayer(int layer, float* x, int64_t M) = 0;
  // A sparse layer's routing (ADR 0027), before its experts run: rows [row0, row0 + n) of this
  // pass chose experts[n, k] (descending weight) with weights[n, k]. Called once or more per
  // sparse layer (once per chunk of rows), in row order. Default: ignored.
  virtual void OnRouting(int layer, int64_t row0, const int32_t* experts, const float* weights,
                         int64_t n, int k) {
    (void)layer, (void)row0, (void)experts, (void)weights, (void)n, (void)k;
  }
};

// How a model executes: its thread pool size and matmul precision (kernels/dispatch.h).
struct ModelOptions {
  int threads = 0;  // 0: all hardware threads; at most kMaxThreads (base/thread_pool.h)
  kernels::Precision precision = kernels::Precision::kF32;
  const kernels::KernelVariant* variant = nullptr;  // null: kernels::DefaultVariant()
  PrepareProgress progress;                         // weight preparation progress, may be empty
  // A prepared-weights artifact to map instead of preparing (model/prepared_artifact.h);
  // empty: prepare from the checkpoint. Its identity is checked by runtime::LoadedModel.
  std::string artifact;
  // Whether the artifact is copied into huge pages or served from its mapping (ADR 0033).
  ArtifactMemory artifact_memory = ArtifactMemory::kCopy;
  // Element type of the KV caches this model makes. Unset: f32 at Precision::kF32 (the exact
  // path), else BF16 (half the bytes attention streams per decode step).
  std::optional<KvDType> kv_dtype;
  // Refuse a checkpoint holding a NaN or infinite weight (DataLoss naming the tensor and the
  // element; model/weight_check.h). The matrices are scanned inside the preparation pass; the
  // norms, and the embedding matrix of an untied model, in a pass of their own. Not with an
  // artifact: its identity pins the checkpoint that `vlstack compile` loaded (and checked).
  bool check_weights = false;
};

// The KV element type a load gets when ModelOptions::kv_dtype is unset.
KvDType DefaultKvDType(kernels::Precision precision);

// Memory a model needs beside its weights to serve `slots` sequences of `capacity` positions
// with a pool of `threads` participants (all counted in bytes, with overflow-checked
// arithmetic; an estimate from above of the buffers, not of the allocator's overhead).
struct ServingMemory {
  uint64_t kv_per_slot = 0;     // one KvCache of `capacity`
  uint64_t other_per_slot = 0;  // a slot's logits [V] and per-row bookkeeping
  uint64_t working = 0;         // one pass of `capacity` rows: activations, logits, scratch
  uint64_t total = 0;           // slots · (kv + other) + working
  // "16 slots x (KV cache 1.0 GiB + 0.1 MiB) + working buffers 0.2 GiB" for error messages.
  std::string Describe(int slots) const;
};
// ResourceExhausted naming the figure when a size overflows 64 bits.
StatusOr<ServingMemory> PlanServingMemory(const Qwen3Config& cfg, KvDType kv_dtype, int capacity,
                                          int slots, int threads);

// A loaded model. Immutable after Load apart from its context's scratch arenas; Forward may
// run concurrently on disjoint caches: the model's thread pool runs one caller at a time, each
// layer chunk (RunLayer) and each Embed holding it throughout, since their buffers are the
// holder's scratch arena (kernels/scratch.h).
class Qwen3Model {
 public:
  // Reads config.json (+generation_config.json) and the safetensors checkpoint of `dir`.
  static StatusOr<std::unique_ptr<Qwen3Model>> Load(const std::string& dir);
  static StatusOr<std::unique_ptr<Qwen3Model>> Load(const std::string& dir,
                                                    const ModelOptions& options);
  // A model over weights the caller bound (tests: a hand-made config and checkpoint). `w`
  // points into `ckpt`'s mappings (file-backed: preparing releases their pages); `cfg` must
  // be one LoadQwen3Config would accept. Load is this after reading and binding `dir`.
  static StatusOr<std::unique_ptr<Qwen3Model>> FromWeights(
      Qwen3Config cfg, std::unique_ptr<SafetensorsCheckpoint> ckpt, Qwen3Weights w,
      const ModelOptions& options);

  const Qwen3Config& config() const { return cfg_; }
  // Checkpoint views: embeddings and norms are used from here, the matrices from prepared().
  const Qwen3Weights& weights() const { return weights_; }
  const PreparedWeights& prepared() const { return *prepared_; }
  const SafetensorsCheckpoint& checkpoint() const { return *ckpt_; }
  const Rope& rope() const { return rope_; }
  // The thread pool, kernel variant and precision every op of this model runs with.
  const kernels::Context& context() const { return *ctx_; }
  // A mixture-of-experts model's routing counts so far (all zero for a dense model).
  const MoeRoutingStats& moe_stats() const { return moe_stats_; }
  // Bytes the scratch arenas of this model's context hold now (its working memory beside the
  // prepared weights and the KV caches). Callable from any thread at any time.
  size_t scratch_bytes() const { return ctx_->ScratchBytes(); }
  // A zeroed cache of `capacity` positions in kv_dtype(); ResourceExhausted (naming the bytes)
  // when its size overflows or the memory cannot be had.
  StatusOr<std::unique_ptr<KvCache>> NewCache(int capacity) const;
  // What one position of this model's caches holds (kv_dtype(), key tiles as NewCache makes
  // them): the shape of an engine's KvPool.
  KvShape kv_shape() const;
  KvDType kv_dtype() const { return kv_dtype_; }

  // out[S, H] = embedding rows of `tokens`. REQUIRES: every token in [0, V) (checked by callers).
  void Embed(std::span<const int32_t> tokens, float* out) const;

  // Runs every decoder layer over x[M, H] (in place) for `rows` (M = rows.size()), writing
  // K/V of each row into its cache. REQUIRES: rows validated (index < capacity; rows of one
  // cache in increasing index order with all earlier indices already written).
  void RunLayers(float* x, std::span<const ForwardRow> rows, LayerHook* hook) const;
  // One decoder layer (attention and MLP residuals) over x[M, H]; RunLayers is this for
  // l = 0..L-1 with the hook after each. `hook`, when given, sees a sparse layer's routing
  // (LayerHook::OnRouting, once per chunk of rows); its AfterLayer is not called here.
  void RunLayer(int layer, float* x, std::span<const ForwardRow> rows,
                LayerHook* hook = nullptr) const;

  // out[M, H] = final RMSNorm of x[M, H].
  void FinalNorm(const float* x, int64_t M, float* out) const;
  // logits[M, V] = h[M, H] · W_lmᵀ.
  void Logits(const float* h, int64_t M, float* logits) const;

 private:
  Qwen3Model(Qwen3Config cfg, std::unique_ptr<SafetensorsCheckpoint> ckpt, Qwen3Weights w,
             std::unique_ptr<kernels::Context> ctx)
      : cfg_(std::move(cfg)),
        ckpt_(std::move(ckpt)),
        weights_(std::move(w)),
        rope_(cfg_),
        ctx_(std::move(ctx)) {}

  // RunLayer over one chunk of rows (x: the chunk's [M, H]), rows [row0, row0 + M) of the pass.
  void RunLayerChunk(int layer, float* x, std::span<const ForwardRow> rows, LayerHook* hook,
                     int64_t row0) const;
  // Scratch of Attention for M rows; ctx may alias its input a, and out its qkv.
  struct AttentionScratch {
    float* qkv = nullptr;  // [M, nh·D + 2·nkv·D]
    float* q = nullptr;    // [M, nh, D]
    float* ctx = nullptr;  // [M, nh, D]
  };
  void Attention(int layer, const float* a, std::span<const ForwardRow> rows,
                 const AttentionScratch& t, float* out) const;
  // Per row over the pool: x[M, H] += add[M, H] (when add is not null), then
  // out[M, H] = RmsNorm(x) with `weight`.
  void AddNorm(float* x, const float* add, int64_t M, const float* weight, float* out) const;

  Qwen3Config cfg_;
  std::unique_ptr<SafetensorsCheckpoint> ckpt_;
  Qwen3Weights weights_;
  std::unique_ptr<PreparedWeights> prepared_;
  Rope rope_;
  std::unique_ptr<kernels::Context> ctx_;
  KvDType kv_dtype_ = KvDType::kF32;
  mutable MoeRoutingStats moe_stats_;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_QWEN3_MODEL_H_
