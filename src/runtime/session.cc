#include "runtime/session.h"

#include <cmath>
#include <string>

namespace vls {

Status ValidateTokenIds(std::span<const int32_t> ids, int vocab, const char* tensor) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgument(std::string(tensor) + "[" + std::to_string(i) + "] = " +
                             std::to_string(ids[i]) + " is outside the vocabulary [0," +
                             std::to_string(vocab) + ")");
    }
  }
  return Status::Ok();
}

Session::Session(const Qwen3Model& model, int capacity)
    : model_(model), capacity_(capacity), cache_(model.NewCache(capacity)) {}

Status Session::ValidatePrefill(int64_t S, std::span<const float> embeddings,
                                const PositionIds& positions) const {
  const int64_t H = model_.config().hidden;
  if (S <= 0) return InvalidArgument("prefill: the sequence is empty");
  if (S > capacity_) {
    return OutOfRange("prefill: sequence length " + std::to_string(S) +
                      " exceeds the context capacity " + std::to_string(capacity_));
  }
  if (static_cast<int64_t>(embeddings.size()) != S * H) {
    return InvalidArgument("embeddings: expected [" + std::to_string(S) + "," + std::to_string(H) +
                           "] (" + std::to_string(S * H) + " values), got " +
                           std::to_string(embeddings.size()) + " values");
  }
  for (size_t i = 0; i < embeddings.size(); ++i) {
    if (!std::isfinite(embeddings[i])) {
      return InvalidArgument("embeddings: value at row " + std::to_string(i / static_cast<size_t>(H)) +
                             " is not finite");
    }
  }
  if (positions.mode != model_.config().position_mode) {
    return InvalidArgument(std::string("positions: the request uses ") + PositionModeName(positions.mode) +
                           " positions but the model uses " +
                           PositionModeName(model_.config().position_mode));
  }
  if (positions.length != S) {
    return InvalidArgument("positions: length " + std::to_string(positions.length) +
                           " differs from the sequence length " + std::to_string(S));
  }
  return Status::Ok();
}

Status Session::PrefillEmbeddings(std::span<const float> embeddings, const PositionIds& positions,
                                  int32_t rope_delta, const PrefillOptions& opts,
                                  std::vector<float>* logits) {
  const int64_t H = model_.config().hidden;
  const int64_t S = positions.length;
  VLS_RETURN_IF_ERROR(ValidatePrefill(S, embeddings, positions));
  // The first decode coordinate must be representable before we accept the delta.
  VLS_RETURN_IF_ERROR(DecodeCoordinate(S, rope_delta).status().WithContext("rope_delta"));

  std::vector<ForwardRow> rows(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) rows[static_cast<size_t>(s)] = {cache_.get(), static_cast<int32_t>(s), positions.At(s)};
  std::vector<float> x(embeddings.begin(), embeddings.end());  // [S, H]
  model_.RunLayers(x.data(), rows, opts.hook);
  // Nothing below can fail: commit the new sequence state.
  length_ = static_cast<int>(S);
  rope_delta_ = rope_delta;
  const int64_t first = opts.all_logits ? 0 : S - 1;
  const int64_t n = S - first;
  std::vector<float> h(static_cast<size_t>(n * H));
  model_.FinalNorm(x.data() + first * H, n, h.data());
  logits->assign(static_cast<size_t>(n * model_.config().vocab), 0.0f);
  model_.Logits(h.data(), n, logits->data());
  return Status::Ok();
}

Status Session::PrefillTokens(std::span<const int32_t> ids, const PositionIds& positions,
                              int32_t rope_delta, const PrefillOptions& opts, std::vector<float>* logits) {
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, model_.config().vocab, "tokens"));
  std::vector<float> emb(ids.size() * static_cast<size_t>(model_.config().hidden));
  model_.Embed(ids, emb.data());
  return PrefillEmbeddings(emb, positions, rope_delta, opts, logits);
}

Status Session::Decode(int32_t token, std::vector<float>* logits) {
  if (length_ == 0) return FailedPrecondition("decode: no prefill has run on this session");
  if (length_ >= capacity_) {
    return OutOfRange("decode: the sequence is at its context capacity " + std::to_string(capacity_));
  }
  const int32_t tok[1] = {token};
  VLS_RETURN_IF_ERROR(ValidateTokenIds(tok, model_.config().vocab, "decode token"));
  VLS_ASSIGN_OR_RETURN(RopeCoord coord, DecodeCoordinate(length_, rope_delta_));
  const int64_t H = model_.config().hidden;
  std::vector<float> x(static_cast<size_t>(H));
  model_.Embed(tok, x.data());
  const ForwardRow row{cache_.get(), length_, coord};
  model_.RunLayers(x.data(), std::span<const ForwardRow>(&row, 1), nullptr);
  ++length_;
  std::vector<float> h(static_cast<size_t>(H));
  model_.FinalNorm(x.data(), 1, h.data());
  logits->assign(static_cast<size_t>(model_.config().vocab), 0.0f);
  model_.Logits(h.data(), 1, logits->data());
  return Status::Ok();
}

}  // namespace vls
