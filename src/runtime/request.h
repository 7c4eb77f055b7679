// The one request type of the runtime (session, batch engine, C ABI, CLI and server alike), and
// the one validator every path runs before anything executes.
//
// A request is a prompt (token ids, or embeddings with an optional DeepStack payload, in the
// model's position mode with a signed rope_delta) plus what to generate. `ValidatePrompt` holds
// every prompt rule (docs/contracts.md §2 layers 2 and 3, §3), `ValidateRequest` adds the
// generation limits; Session::Prefill* and BatchEngine::Submit both call them, so there is no
// second copy. A request checked once on its way in is handed on as a `ValidatedRequest`, which
// only the validator makes, so that the engine does not scan its embeddings and DeepStack
// features again.
#ifndef VLSTACK_RUNTIME_REQUEST_H_
#define VLSTACK_RUNTIME_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/matcher.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/ngram_draft.h"
#include "runtime/positions.h"
#include "runtime/sampler.h"

namespace vls {

// A non-owning view of a prompt, as the prefill entries take it.
struct PromptView {
  // [S] ids. Token prefill when `embeddings` is empty; otherwise optional, and when present
  // they are the ids behind the embedding rows (the DeepStack visual mask, prefix matching).
  std::span<const int32_t> tokens;
  std::span<const float> embeddings;            // [S, H]; non-empty selects an embeddings entry
  const PositionIds* positions = nullptr;       // S rows in the model's mode; never null
  int32_t rope_delta = 0;                       // committed only when the prefill succeeds
  const DeepStackPayload* deepstack = nullptr;  // requires embeddings
  // A DeepStack request without ids may declare how many visual tokens it holds.
  std::optional<int64_t> declared_visual_tokens;

  int64_t length() const { return positions == nullptr ? 0 : positions->length; }
};

// A request owns all its buffers; cancelling it while queued frees them at once.
struct GenerationRequest {
  std::vector<int32_t> tokens;    // [S] prompt ids (token prefill, or the ids behind embeddings)
  std::vector<float> embeddings;  // [S, H]; when non-empty the embeddings entry is used
  PositionIds positions;          // in the model's mode, length S
  int32_t rope_delta = 0;
  std::optional<DeepStackPayload> deepstack;  // requires embeddings
  int max_new_tokens = 16;
  bool ignore_eos = false;              // EOS ids do not stop the request
  std::vector<int32_t> stop_token_ids;  // sampling one of these finishes with "stop"
  SamplingParams sampling;
  // Log-probabilities: -1 none; 0 the sampled token's; N > 0 also the N most likely tokens.
  int logprobs = -1;
  // Speculative decoding (prompt lookup, docs/speculative.md); unset: the engine's default.
  std::optional<SpeculativeParams> speculative = std::nullopt;
  // Structured output (docs/structured_output.md): when set, every generated token follows this
  // grammar (a token mask per step, applied before penalties and sampling); the request's end
  // tokens (EOS unless ignore_eos, stop_token_ids) are allowed only where the grammar may end,
  // and a reply that can only end finishes with "stop". Compiled over the model's vocabulary
  // (ChatPipeline does it, cached); shared, immutable.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  PromptView prompt() const;
  size_t bytes() const;  // buffer bytes this request owns
};

// Largest `logprobs` a request may ask for (OpenAI allows 20).
inline constexpr int kMaxTopLogprobs = 20;

// Every prompt rule against the model and a capacity: 0 < S <= capacity; positions in the
// model's mode with length S; token ids in [0, V) (and their count S); embeddings [S, H], all
// finite; DeepStack validation layers 2 and 3 (visual-token facts from the ids when present);
// the first decode coordinate S + rope_delta representable and non-negative.
Status ValidatePrompt(const LoadedModel& model, int capacity, const PromptView& prompt);

// ValidatePrompt at the model's capacity, plus: max_new_tokens > 0 and prompt + max_new_tokens
// <= C, sampling parameters, stop token ids in [0, V), logprobs in [-1, kMaxTopLogprobs],
// speculative parameters, a grammar compiled for a vocabulary of V ids.
Status ValidateRequest(const LoadedModel& model, const GenerationRequest& request);

// A request that passed ValidateRequest against one loaded model. Only Validate makes one, and
// it gives the request out read-only, so what was checked cannot change afterwards: the
// batch engine of that same model queues it without validating again (BatchEngine::Submit).
// A default-constructed or moved-from one names no model and is validated in full by whoever
// receives it. Movable, not copyable (it owns the request's buffers).
class ValidatedRequest {
 public:
  ValidatedRequest() = default;
  ValidatedRequest(ValidatedRequest&& o) noexcept
      : model_(std::exchange(o.model_, nullptr)), request_(std::move(o.request_)) {}
  ValidatedRequest& operator=(ValidatedRequest&& o) noexcept {
    model_ = std::exchange(o.model_, nullptr);
    request_ = std::move(o.request_);
    return *this;
  }
  ValidatedRequest(const ValidatedRequest&) = delete;
  ValidatedRequest& operator=(const ValidatedRequest&) = delete;

  // ValidateRequest(model, request); on success the request, marked as checked for `model`
  // (which must outlive the mark's use: the engine compares addresses).
  static StatusOr<ValidatedRequest> Validate(const LoadedModel& model, GenerationRequest request);

  const GenerationRequest& get() const { return request_; }
  const GenerationRequest& operator*() const { return request_; }
  const GenerationRequest* operator->() const { return &request_; }
  // The model it was validated against; null when it was not.
  const LoadedModel* model() const { return model_; }
  // Gives the request up: from then on it is an ordinary, unchecked GenerationRequest.
  GenerationRequest Release() && {
    model_ = nullptr;
    return std::move(request_);
  }

 private:
  ValidatedRequest(const LoadedModel* model, GenerationRequest request)
      : model_(model), request_(std::move(request)) {}

  const LoadedModel* model_ = nullptr;
  GenerationRequest request_;
};

// Pieces of ValidatePrompt for callers that check a prompt before building it (the C ABI):
// 0 < S <= capacity and positions in the model's mode with length S; embeddings [S, H], finite.
Status ValidateLengthAndPositions(const LoadedModel& model, int capacity, int64_t S,
                                  const PositionIds& positions);
Status ValidateEmbeddings(std::span<const float> embeddings, int64_t S, int64_t H);

// Checks every token id is in [0, vocab); names the first offender.
Status ValidateTokenIds(std::span<const int32_t> ids, int vocab, const char* tensor);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_REQUEST_H_
