#include "runtime/session.h"

#include <cmath>
#include <string>

namespace vls {

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

Session::Session(const LoadedModel& model)
    : lm_(model), capacity_(model.bounds().capacity), cache_(model.model().NewCache(capacity_)) {}

Status ValidatePrefillInputs(const LoadedModel& lm, int capacity, int64_t S,
                             std::span<const float> embeddings, const PositionIds& positions,
                             bool check_embeddings) {
  const Qwen3Config& cfg = lm.config();
  const int64_t H = cfg.hidden;
  if (S <= 0) return InvalidArgument("prefill: the sequence is empty");
  if (S > capacity) {
    return OutOfRange("prefill: sequence length " + std::to_string(S) +
                      " exceeds the context capacity " + std::to_string(capacity));
  }
  if (check_embeddings) {
    if (static_cast<int64_t>(embeddings.size()) != S * H) {
      return InvalidArgument("embeddings: expected [" + std::to_string(S) + "," +
                             std::to_string(H) + "] (" + std::to_string(S * H) + " values), got " +
                             std::to_string(embeddings.size()) + " values");
    }
    for (size_t i = 0; i < embeddings.size(); ++i) {
      if (!std::isfinite(embeddings[i])) {
        return InvalidArgument("embeddings: value at row " +
                               std::to_string(i / static_cast<size_t>(H)) + " is not finite");
      }
    }
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

Status Session::ValidatePrefill(int64_t S, std::span<const float> embeddings,
                                const PositionIds& positions) const {
  return ValidatePrefillInputs(lm_, capacity_, S, embeddings, positions, true);
}

namespace {

std::vector<ForwardRow> PrefillRows(KvCache* cache, const PositionIds& positions) {
  std::vector<ForwardRow> rows(static_cast<size_t>(positions.length));
  for (int64_t s = 0; s < positions.length; ++s) {
    rows[static_cast<size_t>(s)] = {cache, static_cast<int32_t>(s), positions.At(s)};
  }
  return rows;
}

}  // namespace

Status Session::RunPrefill(const Entry& entry, EntryRun& run, const PositionIds& positions,
                           int32_t rope_delta, const PrefillOptions& opts,
                           std::vector<float>* logits) {
  const int64_t S = positions.length;
  // The first decode coordinate must be representable before we accept the delta.
  VLS_RETURN_IF_ERROR(DecodeCoordinate(S, rope_delta).status().WithContext("rope_delta"));
  run.rows = PrefillRows(cache_.get(), positions);
  run.all_logits = opts.all_logits;
  run.observer = opts.observer;
  entry.Run(run);
  // Nothing can fail past validation: commit the new sequence state.
  length_ = static_cast<int>(S);
  rope_delta_ = rope_delta;
  *logits = std::move(run.logits);
  return Status::Ok();
}

Status Session::PrefillEmbeddings(std::span<const float> embeddings, const PositionIds& positions,
                                  int32_t rope_delta, const PrefillOptions& opts,
                                  std::vector<float>* logits) {
  const int64_t S = positions.length;
  VLS_RETURN_IF_ERROR(ValidatePrefill(S, embeddings, positions));
  EntryRun run;
  run.embeddings = embeddings;
  return RunPrefill(*lm_.entries().Find(kEntryPrefillEmbeddings), run, positions, rope_delta, opts,
                    logits);
}

Status Session::PrefillTokens(std::span<const int32_t> ids, const PositionIds& positions,
                              int32_t rope_delta, const PrefillOptions& opts,
                              std::vector<float>* logits) {
  const int64_t S = static_cast<int64_t>(ids.size());
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, lm_.config().vocab, "tokens"));
  VLS_RETURN_IF_ERROR(ValidatePrefillInputs(lm_, capacity_, S, {}, positions, false));
  EntryRun run;
  run.tokens = ids;
  return RunPrefill(*lm_.entries().Find(kEntryPrefill), run, positions, rope_delta, opts, logits);
}

Status Session::PrefillDeepStack(std::span<const float> embeddings, const PositionIds& positions,
                                 int32_t rope_delta, const DeepStackPayload& payload,
                                 const DeepStackRequestFacts& facts, const PrefillOptions& opts,
                                 std::vector<float>* logits) {
  const int64_t S = positions.length;
  VLS_RETURN_IF_ERROR(
      ValidateDeepStackForModel(payload, lm_.config(), lm_.bounds().nmax, positions.mode));
  VLS_RETURN_IF_ERROR(ValidatePrefill(S, embeddings, positions));
  DeepStackRequestFacts f = facts;
  f.sequence_length = S;
  VLS_RETURN_IF_ERROR(ValidateDeepStackRequest(payload, f));
  const bool diag = opts.hidden_states != nullptr;
  const Entry* entry = lm_.entries().Find(diag ? kEntryDiagnostics : kEntryPrefillDeepStack);
  EntryRun run;
  run.embeddings = embeddings;
  run.deepstack = &payload;
  VLS_RETURN_IF_ERROR(RunPrefill(*entry, run, positions, rope_delta, opts, logits));
  if (diag) *opts.hidden_states = std::move(run.hidden_states);
  return Status::Ok();
}

Status Session::Decode(int32_t token, std::vector<float>* logits) {
  Session* self = this;
  return DecodeBatch(std::span<Session* const>(&self, 1), std::span<const int32_t>(&token, 1),
                     logits);
}

Status Session::DecodeBatch(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                            std::vector<float>* logits) {
  if (sessions.empty() || sessions.size() != tokens.size()) {
    return InvalidArgument("decode: " + std::to_string(sessions.size()) + " sessions but " +
                           std::to_string(tokens.size()) + " tokens");
  }
  const LoadedModel& lm = sessions[0]->lm_;
  EntryRun run;
  run.tokens = tokens;
  run.rows.reserve(sessions.size());
  for (size_t b = 0; b < sessions.size(); ++b) {
    Session& s = *sessions[b];
    if (&s.lm_ != &lm) return InvalidArgument("decode: sessions belong to different models");
    for (size_t c = 0; c < b; ++c) {
      if (sessions[c] == sessions[b]) return InvalidArgument("decode: a session appears twice");
    }
    if (s.length_ == 0) return FailedPrecondition("decode: no prefill has run on this session");
    if (s.length_ >= s.capacity_) {
      return OutOfRange("decode: the sequence is at its context capacity " +
                        std::to_string(s.capacity_));
    }
    VLS_RETURN_IF_ERROR(ValidateTokenIds(tokens.subspan(b, 1), lm.config().vocab, "decode token"));
    VLS_ASSIGN_OR_RETURN(RopeCoord coord, DecodeCoordinate(s.length_, s.rope_delta_));
    run.rows.push_back(ForwardRow{s.cache_.get(), s.length_, coord});
  }
  lm.entries().Find(kEntryDecode)->Run(run);
  for (Session* s : sessions) ++s->length_;
  *logits = std::move(run.logits);
  return Status::Ok();
}

}  // namespace vls
