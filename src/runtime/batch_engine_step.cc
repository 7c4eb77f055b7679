// BatchEngine's pass of one step (docs/contracts.md §4 steps 3 and 4): the prefill chunks within
// the adaptive budget and the decode rows of every running sequence in one ragged pass
// (Session::RunStep, the entry step.main), so each weight is read once per step.
#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "runtime/batch_engine.h"

namespace vls {

int64_t BatchEngine::PrefillBudget(bool decoding, int64_t prefilling) const {
  // A pass holds at most the rows of one whole prompt of the longest length the engine serves
  // (the working memory LoadedModel planned for), so prompts prefill in large chunks while
  // nothing decodes. With streams decoding, the option bounds each prefilling slot's rows: one
  // prompt arriving beside running streams costs them one chunk per token (their inter-token
  // latency holds), and a burst of prompts is not held back by the one stream that started
  // first.
  const int64_t most = model_.bounds().capacity;
  if (decoding && options_.prefill_chunk > 0) {
    return std::min<int64_t>(options_.prefill_chunk * std::max<int64_t>(prefilling, 1), most);
  }
  return most;
}

void BatchEngine::AfterChunk(Slot& slot, int64_t end, std::span<const float> logits,
                             StepResult* out) {
  slot.prefilled = end;
  if (end < slot.prompt_length) return;
  slot.phase = Phase::kDecode;
  // A resumed slot (preempted after it sampled) has its prompt back: its next decode run
  // recomputes the tokens it generated (RunRows) and samples on from there.
  if (!slot.generated.empty()) return;
  if (drafter_) {
    const SpeculativeParams& sp = SpecOf(slot);
    const int index = SlotIndex(slot);
    try {
      if (sp.draft_tokens > 0 && sp.source == DraftSource::kModel) {
        // A prompt the draft model cannot take leaves the slot without drafts.
        (void)drafter_->Begin(index, slot.request.prompt());
      } else {
        drafter_->Forget(index);
      }
    } catch (...) {  // out of memory in the draft model: decode without drafts
      drafter_->Forget(index);
    }
  }
  // The slot keeps the prompt ids (penalties) and the limits; never the embeddings or the
  // DeepStack payload, unless a small pool may preempt it (its prompt is then recomputed).
  if (!preemptible_) {
    slot.request.embeddings = std::vector<float>();
    slot.request.deepstack.reset();
    slot.request.positions = PositionIds();
  }
  try {
    EmitToken(slot, logits, out);
  } catch (...) {
    FinishSlot(slot, FinishReason::kError, ErrorOf("sampling", std::current_exception()), out);
  }
}

void BatchEngine::PrefillChunk(Slot& slot, int64_t rows, bool fault, StepResult* out) {
  const int64_t S = slot.prompt_length;
  const int64_t begin = slot.prefilled, end = std::min(S, begin + rows);
  const bool last = end == S;
  std::vector<float> logits;
  std::string error;
  try {
    if (fault) Fault("prefill", slot.id);
    const Status st = slot.session->PrefillRange(slot.request.prompt(), begin, end, last, &logits);
    if (!st.ok()) error = st.ToString();
  } catch (...) {
    error = ErrorOf("prefill", std::current_exception());
  }
  ++chunks_;
  if (!error.empty()) {
    FinishSlot(slot, FinishReason::kError, error, out);
    return;
  }
  AfterChunk(slot, end, logits, out);
}

std::vector<BatchEngine::Slot*> BatchEngine::PrefillOrder() {
  std::vector<Slot*> order;
  for (Slot& s : slots_) {
    if (s.phase == Phase::kPrefill) order.push_back(&s);
  }
  std::sort(order.begin(), order.end(),
            [](const Slot* a, const Slot* b) { return a->admitted_seq < b->admitted_seq; });
  return order;
}

void BatchEngine::PrefillSlots(int64_t budget, StepResult* out) {
  for (Slot* s : PrefillOrder()) {
    if (budget == 0) return;
    const int64_t remaining = s->prompt_length - s->prefilled;
    const int64_t rows = budget < 0 ? remaining : std::min(remaining, budget);
    PrefillChunk(*s, rows, true, out);
    if (budget > 0) budget -= rows;
  }
}

std::vector<std::pair<BatchEngine::Slot*, int64_t>> BatchEngine::ChooseChunks(bool decoding) {
  // In admission order, within the budget. With the option at 0 each prompt goes whole (the
  // first always; the others while they fit).
  const std::vector<Slot*> order = PrefillOrder();
  int64_t budget = PrefillBudget(decoding, static_cast<int64_t>(order.size()));
  std::vector<std::pair<Slot*, int64_t>> chunks;
  for (Slot* s : order) {
    if (budget <= 0) break;
    const int64_t remaining = s->prompt_length - s->prefilled;
    const int64_t rows = std::min(remaining, budget);
    if (options_.prefill_chunk == 0 && rows < remaining && !chunks.empty()) break;
    chunks.emplace_back(s, rows);
    budget -= rows;
  }
  return chunks;
}

void BatchEngine::RunPass(StepResult* out) {
  MakeRoom();
  const DecodePlan plan = PlanDecode();
  const std::vector<std::pair<Slot*, int64_t>> chunks = ChooseChunks(!plan.rows.empty());
  std::vector<Slot*> chunked;
  std::vector<PromptView> views;
  std::vector<StepPrefill> parts;
  views.reserve(chunks.size());
  for (const auto& [s, rows] : chunks) {
    try {
      Fault("prefill", s->id);
    } catch (...) {
      FinishSlot(*s, FinishReason::kError, ErrorOf("prefill", std::current_exception()), out);
      continue;
    }
    views.push_back(s->request.prompt());
    parts.push_back({s->session.get(), &views.back(), s->prefilled, s->prefilled + rows,
                     s->prefilled + rows == s->prompt_length});
    chunked.push_back(s);
  }
  // Structured output: the decode rows' masks are computed on a helper thread while the pass
  // runs (joined before anything samples, whatever happens).
  std::thread mask_worker;
  std::vector<Slot*> masked;
  StartMasks(plan.rows, &mask_worker, &masked);
  struct Joiner {  // a throw out of the pass still joins the thread
    std::thread* worker;
    ~Joiner() {
      if (worker->joinable()) worker->join();
    }
  } joiner{&mask_worker};
  std::vector<float> logits;
  Status st = Status::Ok();
  try {
    for (const Slot* s : chunked) Fault("step", s->id);
    if (!parts.empty()) {
      st = Session::RunStep(parts, plan.sessions, plan.tokens, plan.counts, &logits);
    } else if (!plan.rows.empty()) {
      st = Session::DecodeRuns(plan.sessions, plan.tokens, plan.counts, &logits);
    }
  } catch (...) {  // out of memory gathering the pass's rows: the parts run alone below
    st = Internal(ErrorOf("step", std::current_exception()));
  }
  JoinMasks(&mask_worker, masked);
  if (!st.ok()) {
    // Isolate the failure: each chunk in a pass of its own, then the decode rows (as one pass,
    // then slot by slot), so one bad part cannot fail the others.
    for (size_t i = 0; i < parts.size(); ++i) {
      PrefillChunk(*chunked[i], parts[i].end - parts[i].begin, false, out);
    }
    if (!plan.rows.empty()) DecodeAlone(plan, out);
    return;
  }
  if (!parts.empty() && !plan.rows.empty()) ++mixed_;
  const size_t V = static_cast<size_t>(model_.config().vocab);
  size_t row = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    ++chunks_;
    std::span<const float> last;
    if (parts[i].want_logits) last = std::span<const float>(logits).subspan(row++ * V, V);
    AfterChunk(*chunked[i], parts[i].end, last, out);
  }
  AcceptDecode(plan, std::span<const float>(logits).subspan(row * V), out);
}

}  // namespace vls
