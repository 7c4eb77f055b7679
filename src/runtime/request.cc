#include "runtime/request.h"

#include <cmath>
#include <string>
#include <utility>

namespace vls {

PromptView GenerationRequest::prompt() const {
  PromptView p;
  p.tokens = tokens;
  p.embeddings = embeddings;
  p.positions = &positions;
  p.rope_delta = rope_delta;
  p.deepstack = deepstack ? &*deepstack : nullptr;
  return p;
}

size_t GenerationRequest::bytes() const {
  return tokens.size() * sizeof(int32_t) + embeddings.size() * sizeof(float) +
         positions.data.size() * sizeof(int32_t) + (deepstack ? deepstack->bytes() : 0) +
         stop_token_ids.size() * sizeof(int32_t) +
         sampling.logit_bias.size() * sizeof(sampling.logit_bias[0]);
}

Status ValidateTokenIds(std::span<const int32_t> ids, int vocab, const char* tensor) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgument(std::string(tensor) + "[" + std::to_string(i) +
                             "] = " + std::to_string(ids[i]) + " is outside the vocabulary [0," +
                             std::to_string(vocab) + ")");
    }
  }
  return Status::Ok();
}

Status ValidateLengthAndPositions(const LoadedModel& lm, int capacity, int64_t S,
                                  const PositionIds& positions) {
  const Qwen3Config& cfg = lm.config();
  if (S <= 0) return InvalidArgument("prefill: the sequence is empty");
  if (S > capacity) {
    return OutOfRange("prefill: sequence length " + std::to_string(S) +
                      " exceeds the context capacity " + std::to_string(capacity));
  }
  if (positions.mode != cfg.position_mode) {
    return InvalidArgument(std::string("positions: the request uses ") +
                           PositionModeName(positions.mode) + " positions but the model uses " +
                           PositionModeName(cfg.position_mode));
  }
  const size_t axes = positions.mode == PositionMode::kMrope ? 3 : 1;
  if (positions.length != S || positions.data.size() != static_cast<size_t>(S) * axes) {
    return InvalidArgument("positions: length " + std::to_string(positions.length) +
                           " differs from the sequence length " + std::to_string(S));
  }
  return Status::Ok();
}

Status ValidateEmbeddings(std::span<const float> embeddings, int64_t S, int64_t H) {
  if (static_cast<int64_t>(embeddings.size()) != S * H) {
    return InvalidArgument("embeddings: expected [" + std::to_string(S) + "," + std::to_string(H) +
                           "] (" + std::to_string(S * H) + " values), got " +
                           std::to_string(embeddings.size()) + " values");
  }
  for (size_t i = 0; i < embeddings.size(); ++i) {
    if (!std::isfinite(embeddings[i])) {
      return InvalidArgument("embeddings: value at row " +
                             std::to_string(i / static_cast<size_t>(H)) + " is not finite");
    }
  }
  return Status::Ok();
}

Status ValidatePrompt(const LoadedModel& lm, int capacity, const PromptView& p) {
  if (p.positions == nullptr) return InvalidArgument("prefill: no positions");
  const Qwen3Config& cfg = lm.config();
  const int64_t S = p.length();
  const bool embeddings = !p.embeddings.empty();
  if (!embeddings && p.deepstack != nullptr) {
    return InvalidArgument("a DeepStack request needs embeddings");
  }
  // The DeepStack payload's request rules (layer 2), then its model rules (layer 3), so a
  // request in the wrong mode is named by the DeepStack rule; then the generic rules.
  if (p.deepstack != nullptr) {
    DeepStackRequestFacts f;
    f.sequence_length = S;
    if (!p.tokens.empty()) f.token_ids = p.tokens;
    f.declared_visual_tokens = p.declared_visual_tokens;
    f.image_token_id = cfg.image_token_id;
    f.video_token_id = cfg.video_token_id;
    VLS_RETURN_IF_ERROR(ValidateDeepStackRequest(*p.deepstack, f));
    VLS_RETURN_IF_ERROR(
        ValidateDeepStackForModel(*p.deepstack, cfg, lm.bounds().nmax, p.positions->mode));
  }
  if (!embeddings || !p.tokens.empty()) {
    if (static_cast<int64_t>(p.tokens.size()) != S) {
      return InvalidArgument("tokens: " + std::to_string(p.tokens.size()) +
                             " ids but the positions cover " + std::to_string(S) + " rows");
    }
  }
  VLS_RETURN_IF_ERROR(ValidateLengthAndPositions(lm, capacity, S, *p.positions));
  if (embeddings) VLS_RETURN_IF_ERROR(ValidateEmbeddings(p.embeddings, S, cfg.hidden));
  VLS_RETURN_IF_ERROR(ValidateTokenIds(p.tokens, cfg.vocab, "tokens"));
  // The first decode coordinate must be representable before the delta is accepted.
  return DecodeCoordinate(S, p.rope_delta).status().WithContext("rope_delta");
}

Status ValidateRequest(const LoadedModel& lm, const GenerationRequest& r) {
  const int capacity = lm.bounds().capacity;
  VLS_RETURN_IF_ERROR(ValidatePrompt(lm, capacity, r.prompt()));
  const int64_t S = r.positions.length;
  if (r.max_new_tokens <= 0) return InvalidArgument("max_new_tokens must be positive");
  if (S + r.max_new_tokens > capacity) {
    return OutOfRange("prompt " + std::to_string(S) + " + max_new_tokens " +
                      std::to_string(r.max_new_tokens) + " exceeds the context capacity " +
                      std::to_string(capacity));
  }
  const int vocab = lm.config().vocab;
  VLS_RETURN_IF_ERROR(ValidateTokenIds(r.stop_token_ids, vocab, "stop_token_ids"));
  if (r.logprobs < -1 || r.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("logprobs: " + std::to_string(r.logprobs) + " is outside [-1, " +
                           std::to_string(kMaxTopLogprobs) + "]");
  }
  for (size_t i = 0; i < r.sampling.logit_bias.size(); ++i) {
    const auto& [token, bias] = r.sampling.logit_bias[i];
    if (token < 0 || token >= vocab) {
      return InvalidArgument("sampling.logit_bias: token " + std::to_string(token) +
                             " is outside the vocabulary [0," + std::to_string(vocab) + ")");
    }
    if (!std::isfinite(bias)) {
      return InvalidArgument("sampling.logit_bias: the bias of token " + std::to_string(token) +
                             " is not finite");
    }
  }
  if (r.speculative) VLS_RETURN_IF_ERROR(ValidateSpeculativeParams(*r.speculative));
  if (r.grammar != nullptr && r.grammar->vocab().size() != vocab) {
    return InvalidArgument("grammar: compiled for a vocabulary of " +
                           std::to_string(r.grammar->vocab().size()) + " ids, not the model's " +
                           std::to_string(vocab));
  }
  return ValidateSamplingParams(r.sampling);
}

StatusOr<ValidatedRequest> ValidatedRequest::Validate(const LoadedModel& model,
                                                      GenerationRequest request) {
  VLS_RETURN_IF_ERROR(ValidateRequest(model, request));
  return ValidatedRequest(&model, std::move(request));
}

}  // namespace vls
