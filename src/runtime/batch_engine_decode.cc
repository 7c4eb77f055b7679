// BatchEngine's shared decode step (docs/contracts.md §4 step 4) and speculative verification:
// drafting (prompt lookup or the draft model), the verify pass, acceptance and the KV rollback
// (docs/speculative.md). The rest of the engine is in batch_engine.cc.
#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "kernels/dispatch.h"
#include "runtime/batch_engine.h"

namespace vls {

const SpeculativeParams& BatchEngine::SpecOf(const Slot& slot) const {
  return slot.request.speculative ? *slot.request.speculative : options_.speculative;
}

int BatchEngine::SlotIndex(const Slot& slot) const {
  return static_cast<int>(&slot - slots_.data());
}

int64_t BatchEngine::DraftLimit(const Slot& slot, int64_t room) const {
  const SpeculativeParams& sp = SpecOf(slot);
  // A pass emits at most drafts + 1 tokens and writes drafts + 1 KV rows: never draft past the
  // request's token limit or the slot's capacity.
  const int64_t tokens_left =
      slot.request.max_new_tokens - static_cast<int64_t>(slot.generated.size()) - 1;
  const int64_t rows_left = slot.session->capacity() - slot.session->length() - 1;
  int64_t limit = std::min({static_cast<int64_t>(std::min(sp.draft_tokens, slot.draft_window)),
                            tokens_left, rows_left, room});
  if (sp.source == DraftSource::kModel) {
    limit = drafter_ ? std::min(limit, drafter_->Room(SlotIndex(slot), slot.session->length())) : 0;
  }
  return std::max<int64_t>(limit, 0);
}

std::vector<int32_t> BatchEngine::Draft(const Slot& slot, int64_t limit) const {
  if (limit <= 0) return {};
  return DraftNgram(slot.request.tokens, slot.generated, SpecOf(slot), static_cast<int>(limit));
}

void BatchEngine::ModelDrafts(std::span<Slot* const> rows, std::span<const int64_t> limits,
                              std::vector<std::vector<int32_t>>* drafts) {
  std::vector<ModelDrafter::Job> jobs;
  std::vector<size_t> which;
  for (size_t b = 0; b < rows.size(); ++b) {
    const Slot& s = *rows[b];
    if (limits[b] <= 0 || SpecOf(s).source != DraftSource::kModel) continue;
    jobs.push_back({SlotIndex(s), s.request.tokens, s.generated, static_cast<int>(limits[b])});
    which.push_back(b);
  }
  if (jobs.empty() || !drafter_) return;
  std::vector<std::vector<int32_t>> got;
  try {
    drafter_->Draft(jobs, &got);
  } catch (...) {  // out of memory drafting: these slots decode plainly this step
    for (const ModelDrafter::Job& j : jobs) drafter_->Forget(j.slot);
    return;
  }
  for (size_t i = 0; i < which.size(); ++i) (*drafts)[which[i]] = std::move(got[i]);
}

void BatchEngine::AcceptRun(Slot& slot, std::span<const int32_t> draft,
                            std::span<const float> logits, StepResult* out) {
  const size_t V = static_cast<size_t>(model_.config().vocab);
  const uint64_t id = slot.id;
  const int32_t fed = slot.next_token;
  const int base = slot.session->length() - static_cast<int>(draft.size()) - 1;  // fed's row
  // A resumed slot's recomputed rows (its generated tokens before `fed`) join its kept rows.
  for (auto row = static_cast<int64_t>(slot.kept.size()); row < base; ++row) {
    slot.kept.push_back(
        TokenKey(slot.generated[static_cast<size_t>(row - slot.prompt_length)],
                 *DecodeCoordinate(static_cast<int>(row), slot.session->rope_delta())));
  }
  // Row j's logits decide token j of this pass. While token j is draft[j] the pass's row j + 1
  // (fed draft[j]) computed the right next distribution; the first other token ends the run.
  // Emitting stops early at a finish (EOS, stop id, length): nothing past it is emitted.
  size_t accepted = 0;
  std::string error;
  try {
    for (size_t j = 0; j <= draft.size(); ++j) {
      const std::span<const float> row = logits.subspan(j * V, V);
      Fault("sample", id);
      // Row j's mask is the grammar's state after the drafts before it (RecordToken accepted
      // them as they were emitted; the rejected ones never reach the matcher).
      std::span<const uint32_t> mask;
      if (!MaskFor(slot, &mask, &error)) break;
      bool ok = false;
      const int32_t token =
          j < draft.size()
              ? slot.sampler->Verify(row, slot.request.tokens, slot.generated, draft[j], &ok, mask)
              : slot.sampler->Sample(row, slot.request.tokens, slot.generated, mask);
      if (token == kNonFiniteLogits) {
        error = NonFiniteLogitsError(slot);
        break;
      }
      if (ok) ++accepted;
      if (RecordToken(slot, token, row, out) || !ok) break;
    }
  } catch (...) {
    error = ErrorOf("sampling", std::current_exception());
  }
  if (!draft.empty()) {
    ++verify_passes_;
    // Draft more while every draft is accepted; after a rejection, one more than were accepted:
    // a run of rejections (free text) costs one drafted row per pass, a run of acceptances keeps
    // the full window. (A pass cut short by a finish or a stop leaves the window as it is.)
    const int most = SpecOf(slot).draft_tokens;
    if (accepted == draft.size()) {
      slot.draft_window = std::min(most, slot.draft_window + 2);
    } else if (slot.phase == Phase::kDecode && slot.id == id) {
      slot.draft_window = static_cast<int>(accepted) + 1;
    }
  }
  drafted_ += draft.size();
  accepted_ += accepted;
  // The sequence keeps the rows of `fed` and the accepted drafts; the rejected drafts' rows go.
  slot.kept.resize(static_cast<size_t>(base));
  for (size_t i = 0; i <= accepted; ++i) {
    const int index = base + static_cast<int>(i);
    slot.kept.push_back(TokenKey(i == 0 ? fed : draft[i - 1],
                                 *DecodeCoordinate(index, slot.session->rope_delta())));
  }
  slot.session->Rewind(base + 1 + static_cast<int>(accepted));
  if (drafter_) drafter_->Keep(SlotIndex(slot), slot.session->length());
  if (!error.empty() && slot.phase != Phase::kFree && slot.id == id) {
    FinishSlot(slot, FinishReason::kError, error, out);
  }
}

BatchEngine::DecodePlan BatchEngine::PlanDecode() {
  DecodePlan plan;
  std::vector<Slot*>& rows = plan.rows;
  for (Slot& s : slots_) {
    if (s.phase == Phase::kDecode && s.next_token >= 0) rows.push_back(&s);
  }
  if (rows.empty()) return plan;
  // Drafts fill the pass up to the rows a plain step could have run through the same matmul
  // kernels (from kOneDnnMinRows rows BF16 products change kernel, and greedy speculation
  // must give the plain tokens bit for bit).
  int64_t room =
      std::max<int64_t>(0, kernels::kOneDnnMinRows - 1 - static_cast<int64_t>(rows.size()));
  std::vector<std::vector<int32_t>>& drafts = plan.drafts;
  drafts.resize(rows.size());
  std::vector<int64_t> limits(rows.size(), 0);
  for (size_t b = 0; b < rows.size(); ++b) {
    Slot& s = *rows[b];
    limits[b] = RunRows(s) > 1 ? 0 : DraftLimit(s, room);  // no drafts while recomputing
    if (SpecOf(s).source == DraftSource::kNgram) {
      try {
        drafts[b] = Draft(s, limits[b]);
      } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory drafting: decode plainly
      }
      limits[b] = static_cast<int64_t>(drafts[b].size());
    }
    room -= limits[b];
  }
  ModelDrafts(rows, limits, &drafts);
  // Structured output: drafts end where the grammar refuses them.
  for (size_t b = 0; b < rows.size(); ++b) {
    try {
      TruncateDraft(*rows[b], &drafts[b]);
    } catch (...) {  // out of memory walking the grammar: decode this row without drafts
      drafts[b].clear();
    }
  }
  for (size_t b = 0; b < rows.size(); ++b) {
    Slot& s = *rows[b];
    plan.sessions.push_back(s.session.get());
    const int64_t run = RunRows(s);
    plan.replays.push_back(run - 1);
    plan.tokens.insert(plan.tokens.end(), s.generated.end() - run, s.generated.end());
    plan.tokens.insert(plan.tokens.end(), drafts[b].begin(), drafts[b].end());
    plan.counts.push_back(static_cast<int32_t>(drafts[b].size() + static_cast<size_t>(run)));
  }
  return plan;
}

void BatchEngine::AcceptDecode(const DecodePlan& plan, std::span<const float> logits,
                               StepResult* out) {
  const size_t V = static_cast<size_t>(model_.config().vocab);
  size_t row = 0;
  for (size_t b = 0; b < plan.rows.size(); ++b) {
    const size_t n = static_cast<size_t>(plan.counts[b]);
    const auto r = static_cast<size_t>(plan.replays[b]);  // recomputed rows: no token of theirs
    AcceptRun(*plan.rows[b], plan.drafts[b], logits.subspan((row + r) * V, (n - r) * V), out);
    row += n;
  }
}

void BatchEngine::DecodeAlone(const DecodePlan& plan, StepResult* out) {
  std::vector<float> logits;
  if (Session::DecodeRuns(plan.sessions, plan.tokens, plan.counts, &logits).ok()) {
    AcceptDecode(plan, logits, out);
    return;
  }
  // Isolate the failure: decode slot by slot so one bad row cannot fail the others.
  size_t first = 0;
  for (size_t b = 0; b < plan.rows.size(); ++b) {
    Session* one_session = plan.sessions[b];
    const size_t n = static_cast<size_t>(plan.counts[b]);
    std::vector<float> one;
    const Status rs = Session::DecodeRuns(std::span<Session* const>(&one_session, 1),
                                          std::span<const int32_t>(plan.tokens).subspan(first, n),
                                          std::span<const int32_t>(&plan.counts[b], 1), &one);
    first += n;
    if (!rs.ok()) {
      FinishSlot(*plan.rows[b], FinishReason::kError, rs.ToString(), out);
      continue;
    }
    const size_t V = static_cast<size_t>(model_.config().vocab);
    AcceptRun(*plan.rows[b], plan.drafts[b],
              std::span<const float>(one).subspan(static_cast<size_t>(plan.replays[b]) * V), out);
  }
}

}  // namespace vls
