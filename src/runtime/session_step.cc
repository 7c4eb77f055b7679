// Session::RunStep: the prefill chunks and decode runs of one engine step in one pass through
// step.main (docs/contracts.md §4).
#include <optional>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace vls {

Status Session::RunStep(std::span<const StepPrefill> prefills, std::span<Session* const> decodes,
                        std::span<const int32_t> tokens, std::span<const int32_t> counts,
                        std::vector<float>* logits) {
  if (prefills.empty() && decodes.empty()) return InvalidArgument("step: nothing to run");
  const LoadedModel& lm = prefills.empty() ? decodes[0]->lm_ : prefills[0].session->lm_;
  const int64_t H = lm.config().hidden;
  EntryRun run;
  std::vector<std::optional<DeepStackPayload>> slices(prefills.size());
  std::vector<Session*> prefilling;
  for (size_t i = 0; i < prefills.size(); ++i) {
    const StepPrefill& p = prefills[i];
    Session& s = *p.session;
    if (&s.lm_ != &lm) return InvalidArgument("step: sessions belong to different models");
    for (const Session* o : prefilling) {
      if (o == &s) return InvalidArgument("step: a session appears twice");
    }
    prefilling.push_back(&s);
    VLS_RETURN_IF_ERROR(s.CheckChunk(*p.prompt, p.begin, p.end));
    EntrySegment seg;
    (void)ChunkInputs(*p.prompt, p.begin, p.end, H, &seg, &slices[i]);
    seg.logits = p.want_logits ? EntrySegment::Logits::kLast : EntrySegment::Logits::kNone;
    run.segments.push_back(seg);
    for (int64_t r = p.begin; r < p.end; ++r) {
      run.rows.push_back({s.cache_.get(), static_cast<int32_t>(r), p.prompt->positions->At(r)});
    }
  }
  VLS_RETURN_IF_ERROR(AppendDecodeRows(lm, decodes, tokens, counts, prefilling, &run.rows));
  size_t first = 0;
  for (const int32_t n : counts) {
    EntrySegment seg;
    seg.rows = n;
    seg.tokens = tokens.subspan(first, static_cast<size_t>(n));
    seg.logits = EntrySegment::Logits::kAll;
    run.segments.push_back(seg);
    first += static_cast<size_t>(n);
  }
  for (const StepPrefill& p : prefills) VLS_RETURN_IF_ERROR(p.session->ReserveRows(p.end));
  for (size_t b = 0; b < decodes.size(); ++b) {
    VLS_RETURN_IF_ERROR(decodes[b]->ReserveRows(decodes[b]->length_ + counts[b]));
  }
  // From here on each prefill session's rows from its chunk's first are overwritten (its
  // previous sequence is gone); a decode session writes only rows past its length.
  for (const StepPrefill& p : prefills) {
    p.session->length_ = 0;
    p.session->rope_delta_ = 0;
    p.session->valid_rows_ = p.begin;
  }
  VLS_RETURN_IF_ERROR(RunEntryGuarded(*lm.entries().Find(kEntryStep), run, "step"));
  for (const StepPrefill& p : prefills) {
    Session& s = *p.session;
    s.valid_rows_ = p.end;
    if (p.end == p.prompt->length()) {
      s.length_ = static_cast<int>(p.end);
      s.rope_delta_ = p.prompt->rope_delta;
    }
  }
  for (size_t b = 0; b < decodes.size(); ++b) {
    Session& s = *decodes[b];
    s.length_ += counts[b];
    s.valid_rows_ = s.length_;
  }
  *logits = std::move(run.logits);
  return Status::Ok();
}

}  // namespace vls
