// A single sequence over a loaded model: prefill (tokens or embeddings), then decode.
//
// The decode-position state (KV length and rope_delta) is transactional (CONTRACTS §3):
// every input is validated before anything runs, and length/delta are committed only when
// the prefill succeeds, so a rejected prefill leaves the previous KV, length and delta intact.
#ifndef VLSTACK_RUNTIME_SESSION_H_
#define VLSTACK_RUNTIME_SESSION_H_

#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"

namespace vls {

struct PrefillOptions {
  bool all_logits = false;        // logits for every row instead of the last
  LayerHook* observer = nullptr;  // sees every layer's output (tooling); not owned
  // DeepStack prefill only: run the diagnostics entry and return every post-hook hidden state.
  std::vector<std::vector<float>>* hidden_states = nullptr;
};

// Thread safety: one thread at a time per session; the model may be shared.
class Session {
 public:
  // The session's KV capacity is the loaded model's static capacity C.
  explicit Session(const LoadedModel& model);

  // Embeddings prefill. embeddings: [S, H] f32; positions in the model's mode with length S.
  // logits: [V] (last row) or [S, V] with all_logits. Replaces any previous sequence.
  Status PrefillEmbeddings(std::span<const float> embeddings, const PositionIds& positions,
                           int32_t rope_delta, const PrefillOptions& opts,
                           std::vector<float>* logits);
  // Token prefill: ids must be in [0, V).
  Status PrefillTokens(std::span<const int32_t> ids, const PositionIds& positions,
                       int32_t rope_delta, const PrefillOptions& opts, std::vector<float>* logits);

  // DeepStack prefill (prefill_embeddings_deepstack.main, or its diagnostics twin when
  // opts.hidden_states is set). Runs validation layers 2 and 3 on the payload first.
  Status PrefillDeepStack(std::span<const float> embeddings, const PositionIds& positions,
                          int32_t rope_delta, const DeepStackPayload& payload,
                          const DeepStackRequestFacts& facts, const PrefillOptions& opts,
                          std::vector<float>* logits);

  // Appends one token at physical index length() with RoPE coordinate length() + delta.
  // logits: [V].
  Status Decode(int32_t token, std::vector<float>* logits);

  // One ragged decode step over several sessions of the same model (decode_step.main with
  // B rows, one batched pass through each weight): session b appends tokens[b] at its own
  // length with its own coordinate. Every row is validated before any runs; on error no
  // session changes. logits: [B, V].
  static Status DecodeBatch(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                            std::vector<float>* logits);

  int length() const { return length_; }
  int32_t rope_delta() const { return rope_delta_; }
  int capacity() const { return capacity_; }
  const KvCache& cache() const { return *cache_; }
  const Qwen3Model& model() const { return lm_.model(); }

  // Checks an embeddings-prefill request without running it (also used by the batch engine).
  Status ValidatePrefill(int64_t S, std::span<const float> embeddings,
                         const PositionIds& positions) const;

 private:
  // Checks the delta, then runs a validated prefill through `entry` (rows from `positions`)
  // and commits length and delta.
  Status RunPrefill(const Entry& entry, EntryRun& run, const PositionIds& positions,
                    int32_t rope_delta, const PrefillOptions& opts, std::vector<float>* logits);

  const LoadedModel& lm_;
  int capacity_;
  std::unique_ptr<KvCache> cache_;
  int length_ = 0;
  int32_t rope_delta_ = 0;
};

// Checks a prefill of S rows against the model and a capacity: 0 < S <= capacity, positions in
// the model's mode with length S, and (when `check_embeddings`) embeddings [S, H], all finite.
Status ValidatePrefillInputs(const LoadedModel& model, int capacity, int64_t S,
                             std::span<const float> embeddings, const PositionIds& positions,
                             bool check_embeddings);

// Checks every token id is in [0, vocab); names the first offender.
Status ValidateTokenIds(std::span<const int32_t> ids, int vocab, const char* tensor);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_SESSION_H_
