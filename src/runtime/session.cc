#include "runtime/session.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <new>
#include <string>

namespace vls {

namespace {

std::unique_ptr<KvCache> NewCacheOrThrow(const LoadedModel& model) {
  StatusOr<std::unique_ptr<KvCache>> cache = model.model().NewCache(model.bounds().capacity);
  if (!cache.ok()) throw std::bad_alloc();
  return std::move(*cache);
}

}  // namespace

StatusOr<std::unique_ptr<Session>> Session::Create(const LoadedModel& model) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                       model.model().NewCache(model.bounds().capacity));
  try {
    return std::unique_ptr<Session>(new Session(model, std::move(cache)));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("session: out of memory");
  }
}

Session::Session(const LoadedModel& model, std::unique_ptr<KvCache> cache)
    : lm_(model), capacity_(model.bounds().capacity), cache_(std::move(cache)) {}

Session::Session(const LoadedModel& model) : Session(model, NewCacheOrThrow(model)) {}

Session::Session(const LoadedModel& model, std::shared_ptr<KvPool> pool)
    : Session(model, std::make_unique<KvCache>(std::move(pool), model.bounds().capacity)) {}

Status Session::ReserveRows(int64_t rows) {
  if (rows > capacity_) {
    return OutOfRange("the sequence needs " + std::to_string(rows) +
                      " positions, past the context capacity " + std::to_string(capacity_));
  }
  return cache_->Reserve(static_cast<int>(rows));
}

bool Session::AdoptPrefix(std::span<const int32_t> ids, std::span<const uint64_t> hashes) {
  Reset();
  if (!cache_->Adopt(ids, hashes)) return false;
  valid_rows_ = static_cast<int64_t>(ids.size()) * cache_->block_keys();
  return true;
}

void Session::ReleaseMemory() {
  Reset();
  cache_->Shrink(0);
}

void Session::Reset() {
  length_ = 0;
  valid_rows_ = 0;
  rope_delta_ = 0;
}

void Session::Rewind(int length) {
  length_ = std::clamp(length, 0, length_);
  valid_rows_ = length_;
}

bool Session::CopyPrefixFrom(const Session& src, int64_t rows) {
  if (&src == this || &src.lm_ != &lm_ || rows < 0 || rows > src.valid_rows_) return false;
  // Into blocks of its own: a block it holds may be named (shared), and is never written.
  Reset();
  cache_->Shrink(0);
  if (!cache_->CopyPrefixFrom(*src.cache_, static_cast<int>(rows))) return false;
  length_ = 0;
  rope_delta_ = 0;
  valid_rows_ = rows;
  return true;
}

void Session::Truncate(int64_t rows) {
  length_ = 0;
  rope_delta_ = 0;
  valid_rows_ = std::clamp<int64_t>(rows, 0, valid_rows_);
  cache_->Shrink(static_cast<int>(valid_rows_));
}

Status Session::RunRange(const Entry& entry, EntryRun& run, const PromptView& prompt, int64_t begin,
                         int64_t end, bool all_logits, LayerHook* observer,
                         std::vector<float>* logits) {
  const PositionIds& positions = *prompt.positions;
  run.rows.resize(static_cast<size_t>(end - begin));
  for (int64_t s = begin; s < end; ++s) {
    run.rows[static_cast<size_t>(s - begin)] = {cache_.get(), static_cast<int32_t>(s),
                                                positions.At(s)};
  }
  run.all_logits = all_logits;
  run.observer = observer;
  VLS_RETURN_IF_ERROR(ReserveRows(end));
  // From here on rows >= begin are overwritten: the previous sequence is gone.
  length_ = 0;
  rope_delta_ = 0;
  valid_rows_ = begin;
  VLS_RETURN_IF_ERROR(RunEntryGuarded(entry, run, "prefill"));
  valid_rows_ = end;
  if (end == prompt.length()) {
    // Nothing can fail past validation: commit the new sequence state.
    length_ = static_cast<int>(end);
    rope_delta_ = prompt.rope_delta;
  }
  if (logits != nullptr) *logits = std::move(run.logits);
  return Status::Ok();
}

Status Session::CheckChunk(const PromptView& prompt, int64_t begin, int64_t end) const {
  const int64_t S = prompt.length();
  if (begin < 0 || begin >= end || end > S) {
    return InvalidArgument("prefill: chunk [" + std::to_string(begin) + "," + std::to_string(end) +
                           ") is not a non-empty range of the prompt's " + std::to_string(S) +
                           " rows");
  }
  if (begin > valid_rows_) {
    return FailedPrecondition("prefill: chunk starts at row " + std::to_string(begin) +
                              " but the cache holds only " + std::to_string(valid_rows_) + " rows");
  }
  return Status::Ok();
}

std::string_view Session::ChunkInputs(const PromptView& prompt, int64_t begin, int64_t end,
                                      int64_t H, EntrySegment* seg,
                                      std::optional<DeepStackPayload>* slice) {
  const int64_t n = end - begin;
  seg->rows = n;
  if (prompt.embeddings.empty()) {
    seg->tokens = prompt.tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(n));
    return kEntryPrefill;
  }
  seg->embeddings =
      prompt.embeddings.subspan(static_cast<size_t>(begin * H), static_cast<size_t>(n * H));
  if (prompt.deepstack == nullptr) return kEntryPrefillEmbeddings;
  if (begin == 0 && end == prompt.length()) {
    seg->deepstack = prompt.deepstack;
  } else {
    *slice = prompt.deepstack->Slice(begin, end);
    seg->deepstack = &**slice;
  }
  return kEntryPrefillDeepStack;
}

Status Session::PrefillRange(const PromptView& prompt, int64_t begin, int64_t end, bool want_logits,
                             std::vector<float>* logits) {
  VLS_RETURN_IF_ERROR(CheckChunk(prompt, begin, end));
  EntrySegment seg;
  std::optional<DeepStackPayload> slice;
  const std::string_view name = ChunkInputs(prompt, begin, end, lm_.config().hidden, &seg, &slice);
  EntryRun run;
  run.skip_logits = !want_logits;
  run.tokens = seg.tokens;
  run.embeddings = seg.embeddings;
  run.deepstack = seg.deepstack;
  std::vector<float> out;
  VLS_RETURN_IF_ERROR(
      RunRange(*lm_.entries().Find(name), run, prompt, begin, end, false, nullptr, &out));
  if (want_logits && logits != nullptr) *logits = std::move(out);
  return Status::Ok();
}

Status Session::PrefillWhole(const PromptView& prompt, const PrefillOptions& opts,
                             std::vector<float>* logits) {
  VLS_RETURN_IF_ERROR(ValidatePrompt(lm_, capacity_, prompt));
  const int64_t S = prompt.length();
  EntryRun run;
  std::string_view name = kEntryPrefill;
  const bool diag = prompt.deepstack != nullptr && opts.hidden_states != nullptr;
  if (prompt.embeddings.empty()) {
    run.tokens = prompt.tokens;
  } else {
    run.embeddings = prompt.embeddings;
    name = kEntryPrefillEmbeddings;
    if (prompt.deepstack != nullptr) {
      name = diag ? kEntryDiagnostics : kEntryPrefillDeepStack;
      run.deepstack = prompt.deepstack;
    }
  }
  VLS_RETURN_IF_ERROR(RunRange(*lm_.entries().Find(name), run, prompt, 0, S, opts.all_logits,
                               opts.observer, logits));
  if (diag) *opts.hidden_states = std::move(run.hidden_states);
  return Status::Ok();
}

Status Session::Prefill(const PromptView& prompt, const PrefillOptions& opts,
                        std::vector<float>* logits) {
  return PrefillWhole(prompt, opts, logits);
}

Status Session::PrefillEmbeddings(std::span<const float> embeddings, const PositionIds& positions,
                                  int32_t rope_delta, const PrefillOptions& opts,
                                  std::vector<float>* logits) {
  PromptView p;
  p.embeddings = embeddings;
  p.positions = &positions;
  p.rope_delta = rope_delta;
  if (embeddings.empty()) {
    return InvalidArgument("embeddings: expected [" + std::to_string(positions.length) + "," +
                           std::to_string(lm_.config().hidden) + "], got no values");
  }
  return PrefillWhole(p, opts, logits);
}

Status Session::PrefillTokens(std::span<const int32_t> ids, const PositionIds& positions,
                              int32_t rope_delta, const PrefillOptions& opts,
                              std::vector<float>* logits) {
  PromptView p;
  p.tokens = ids;
  p.positions = &positions;
  p.rope_delta = rope_delta;
  return PrefillWhole(p, opts, logits);
}

Status Session::PrefillDeepStack(std::span<const float> embeddings, const PositionIds& positions,
                                 int32_t rope_delta, const DeepStackPayload& payload,
                                 const DeepStackRequestFacts& facts, const PrefillOptions& opts,
                                 std::vector<float>* logits) {
  PromptView p;
  p.embeddings = embeddings;
  p.positions = &positions;
  p.rope_delta = rope_delta;
  p.deepstack = &payload;
  if (facts.token_ids) p.tokens = *facts.token_ids;
  p.declared_visual_tokens = facts.declared_visual_tokens;
  if (embeddings.empty()) {
    return InvalidArgument("embeddings: expected [" + std::to_string(positions.length) + "," +
                           std::to_string(lm_.config().hidden) + "], got no values");
  }
  return PrefillWhole(p, opts, logits);
}

Status Session::Decode(int32_t token, std::vector<float>* logits) {
  Session* self = this;
  return DecodeBatch(std::span<Session* const>(&self, 1), std::span<const int32_t>(&token, 1),
                     logits);
}

Status Session::DecodeBatch(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                            std::vector<float>* logits) {
  const std::vector<int32_t> ones(sessions.size(), 1);
  return DecodeRuns(sessions, tokens, ones, logits);
}

Status Session::AppendDecodeRows(const LoadedModel& lm, std::span<Session* const> sessions,
                                 std::span<const int32_t> tokens, std::span<const int32_t> counts,
                                 std::span<Session* const> others, std::vector<ForwardRow>* rows) {
  if (sessions.size() != counts.size()) {
    return InvalidArgument("decode: " + std::to_string(sessions.size()) + " sessions but " +
                           std::to_string(counts.size()) + " runs");
  }
  size_t total = 0;
  for (const int32_t n : counts) {
    if (n < 1) return InvalidArgument("decode: a run of " + std::to_string(n) + " tokens");
    total += static_cast<size_t>(n);
  }
  if (total != tokens.size()) {
    return InvalidArgument("decode: runs of " + std::to_string(total) + " tokens but " +
                           std::to_string(tokens.size()) + " tokens");
  }
  size_t first = 0;
  for (size_t b = 0; b < sessions.size(); ++b) {
    Session& s = *sessions[b];
    if (&s.lm_ != &lm) return InvalidArgument("decode: sessions belong to different models");
    for (size_t c = 0; c < b; ++c) {
      if (sessions[c] == sessions[b]) return InvalidArgument("decode: a session appears twice");
    }
    for (const Session* o : others) {
      if (o == sessions[b]) return InvalidArgument("decode: a session appears twice");
    }
    if (s.length_ == 0) return FailedPrecondition("decode: no prefill has run on this session");
    const int32_t n = counts[b];
    if (s.length_ > s.capacity_ - n) {
      return OutOfRange("decode: the sequence is at its context capacity " +
                        std::to_string(s.capacity_));
    }
    VLS_RETURN_IF_ERROR(ValidateTokenIds(tokens.subspan(first, static_cast<size_t>(n)),
                                         lm.config().vocab, "decode token"));
    for (int32_t j = 0; j < n; ++j) {
      VLS_ASSIGN_OR_RETURN(RopeCoord coord, DecodeCoordinate(s.length_ + j, s.rope_delta_));
      rows->push_back(ForwardRow{s.cache_.get(), s.length_ + j, coord});
    }
    first += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status Session::DecodeRuns(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                           std::span<const int32_t> counts, std::vector<float>* logits) {
  if (sessions.empty()) return InvalidArgument("decode: no sessions");
  const LoadedModel& lm = sessions[0]->lm_;
  EntryRun run;
  run.tokens = tokens;
  run.rows.reserve(tokens.size());
  VLS_RETURN_IF_ERROR(AppendDecodeRows(lm, sessions, tokens, counts, {}, &run.rows));
  for (size_t b = 0; b < sessions.size(); ++b) {
    VLS_RETURN_IF_ERROR(sessions[b]->ReserveRows(sessions[b]->length_ + counts[b]));
  }
  // A throw leaves every session as it was: only rows from length() on of each cache were
  // being written, and no length moves.
  VLS_RETURN_IF_ERROR(RunEntryGuarded(*lm.entries().Find(kEntryDecode), run, "decode"));
  for (size_t b = 0; b < sessions.size(); ++b) {
    Session& s = *sessions[b];
    s.length_ += counts[b];
    s.valid_rows_ = s.length_;
  }
  *logits = std::move(run.logits);
  return Status::Ok();
}

}  // namespace vls
