// A single sequence over a loaded model: prefill (tokens or embeddings), then decode.
//
// The decode-position state (KV length and rope_delta) is transactional (docs/contracts.md §3):
// every input is validated before anything runs, and length/delta are committed only when
// the prefill succeeds, so a rejected prefill leaves the previous KV, length and delta intact.
#ifndef VLSTACK_RUNTIME_SESSION_H_
#define VLSTACK_RUNTIME_SESSION_H_

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "runtime/deepstack.h"
#include "runtime/entries.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/request.h"

namespace vls {

struct PrefillOptions {
  bool all_logits = false;        // logits for every row instead of the last
  LayerHook* observer = nullptr;  // sees every layer's output (tooling); not owned
  // DeepStack prefill only: run the diagnostics entry and return every post-hook hidden state.
  std::vector<std::vector<float>>* hidden_states = nullptr;
};

class Session;

// A prefill chunk of a combined step (Session::RunStep): rows [begin, end) of `prompt` into
// `session`, as PrefillRange would run them.
struct StepPrefill {
  Session* session = nullptr;
  const PromptView* prompt = nullptr;
  int64_t begin = 0, end = 0;
  bool want_logits = false;  // the chunk's last row's logits (the chunk that ends the prompt)
};

// Thread safety: one thread at a time per session; the model may be shared.
class Session {
 public:
  // The session's KV capacity is the loaded model's static capacity C. ResourceExhausted
  // (naming the bytes) when its KV cache cannot be allocated.
  static StatusOr<std::unique_ptr<Session>> Create(const LoadedModel& model);
  // The same, throwing std::bad_alloc when the KV cache cannot be allocated. Prefer Create.
  // (LoadedModel::Load has checked that the memory of `slots` caches is there.)
  explicit Session(const LoadedModel& model);
  // A session whose cache takes blocks from `pool` (the batch engine's, paged KV memory) as its
  // sequence grows: each prefill or decode first reserves the blocks of the rows it writes, and
  // fails with ResourceExhausted, changing nothing, when the pool has too few free. REQUIRES:
  // pool's shape is model.model().kv_shape().
  Session(const LoadedModel& model, std::shared_ptr<KvPool> pool);

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

  // Any prompt (request.h): ValidatePrompt, then the whole prefill through the prompt's entry.
  Status Prefill(const PromptView& prompt, const PrefillOptions& opts, std::vector<float>* logits);

  // Chunked prefill: runs rows [begin, end) of `prompt` through its entry (the DeepStack payload
  // sliced to those rows), attending to rows [0, begin) already in the cache. begin == 0 starts
  // a new sequence; begin > 0 continues one whose rows [0, begin) are this prompt's (an earlier
  // chunk, or a reused prefix the caller matched). The chunk that reaches S commits length S
  // and the prompt's delta; until then decode is refused. logits: [V] of row end - 1 when
  // `want_logits`, else left empty.
  // REQUIRES: ValidatePrompt(model, capacity(), prompt) passed. The range is checked here.
  Status PrefillRange(const PromptView& prompt, int64_t begin, int64_t end, bool want_logits,
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
  // The same with counts[b] >= 1 consecutive tokens for session b (speculative verification:
  // the last accepted token and the drafts): `tokens` holds the runs in session order, session
  // b's j-th token goes to index length() + j at coordinate length() + j + delta, attending to
  // the earlier rows of its run. logits: [sum(counts), V], one row per token. Every session
  // must have room for its whole run; on error no session changes.
  static Status DecodeRuns(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                           std::span<const int32_t> counts, std::vector<float>* logits);

  // One engine step in one ragged pass (step.main): the prefill chunks `prefills` and the decode
  // runs (DecodeRuns' arguments) of distinct sessions of one model, so each weight is read once.
  // Each part changes its session as PrefillRange or DecodeRuns would, and gives the same
  // logits: [R, V], the last row of each prefill with want_logits in order, then every decode
  // row. Every part is validated before any runs; on error no decode session changes and each
  // prefill session keeps only the rows before its chunk.
  static Status RunStep(std::span<const StepPrefill> prefills, std::span<Session* const> decodes,
                        std::span<const int32_t> tokens, std::span<const int32_t> counts,
                        std::vector<float>* logits);

  // Committed sequence length (0 while no prefill has completed); decode appends at it.
  int length() const { return length_; }
  // Cache rows [0, valid_rows()) hold K/V of the current or last sequence (after a failed or
  // unfinished prefill: of the rows before the failing chunk).
  int64_t valid_rows() const { return valid_rows_; }
  int32_t rope_delta() const { return rope_delta_; }
  int capacity() const { return capacity_; }
  const KvCache& cache() const { return *cache_; }
  const Qwen3Model& model() const { return lm_.model(); }

  // Forgets the sequence (length, delta and valid rows 0); the cache bytes stay allocated.
  void Reset();
  // Ends the committed sequence but keeps rows [0, min(rows, valid_rows())) valid, for a prompt
  // that will continue from them (prefix reuse).
  void Truncate(int64_t rows);
  // Ends the committed sequence and makes rows [0, rows) of `src`'s cache this session's valid
  // rows (a copy into blocks of its own: a block it held may be shared), for a prompt that will
  // continue from them (prefix reuse across slots). False (nothing changed) unless src is another
  // session of the same model holding `rows` valid rows; false holding nothing when the pool has
  // too few free blocks for the copy.
  bool CopyPrefixFrom(const Session& src, int64_t rows);
  // Forgets the sequence and gives every block of a pooled cache back (a private cache keeps its
  // memory).
  void ReleaseMemory();
  // Ends the committed sequence and makes the shared named blocks `ids` (KvPool's prefix cache)
  // this session's first blocks and their rows its valid rows, for a prompt that continues from
  // them. False (holding nothing) when they cannot be had.
  bool AdoptPrefix(std::span<const int32_t> ids, std::span<const uint64_t> hashes);
  // The pool id of the session's block b, and whether it is named (shared: never written).
  int32_t kv_block_id(int64_t b) const { return cache_->block_id(b); }
  bool KvBlockNamed(int64_t b) const { return cache_->BlockNamed(b); }
  int kv_block_keys() const { return cache_->block_keys(); }
  // Blocks a pooled cache holds, and the blocks it would hold with rows [0, rows).
  int64_t kv_blocks() const { return cache_->blocks_held(); }
  int64_t KvBlocksFor(int64_t rows) const { return cache_->BlocksFor(rows); }
  // Holds the blocks for rows [0, rows) (ResourceExhausted when the pool has too few free).
  Status ReserveRows(int64_t rows);
  // Keeps the committed sequence but shortens it to `length` rows (the rejected drafts of a
  // verify pass). REQUIRES: 0 < length <= length().
  void Rewind(int length);

 private:
  // Runs rows [begin, end) through `entry` (run holds the chunk's inputs), catching anything the
  // entry throws: the session then resets to the rows before the chunk.
  Status RunRange(const Entry& entry, EntryRun& run, const PromptView& prompt, int64_t begin,
                  int64_t end, bool all_logits, LayerHook* observer, std::vector<float>* logits);
  Status PrefillWhole(const PromptView& prompt, const PrefillOptions& opts,
                      std::vector<float>* logits);
  // Whether [begin, end) is a chunk of `prompt` this session can run next.
  Status CheckChunk(const PromptView& prompt, int64_t begin, int64_t end) const;
  // The inputs of rows [begin, end) of `prompt` into `seg` (`slice` holds a cut DeepStack
  // payload); returns the prefill entry that takes them.
  static std::string_view ChunkInputs(const PromptView& prompt, int64_t begin, int64_t end,
                                      int64_t H, EntrySegment* seg,
                                      std::optional<DeepStackPayload>* slice);
  // Validates decode runs (DecodeRuns' arguments; no session may also be in `others`) and
  // appends their rows.
  static Status AppendDecodeRows(const LoadedModel& lm, std::span<Session* const> sessions,
                                 std::span<const int32_t> tokens, std::span<const int32_t> counts,
                                 std::span<Session* const> others, std::vector<ForwardRow>* rows);
  Session(const LoadedModel& model, std::unique_ptr<KvCache> cache);

  const LoadedModel& lm_;
  int capacity_;
  std::unique_ptr<KvCache> cache_;
  int length_ = 0;
  int64_t valid_rows_ = 0;
  int32_t rope_delta_ = 0;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_SESSION_H_
