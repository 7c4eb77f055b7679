#include "runtime/model_draft.h"

#include <algorithm>
#include <string>

namespace vls {

namespace {

// The prompt's positions in `mode`: M-RoPE to 1-D keeps the temporal axis (text rows have the
// same value on all three axes), 1-D to M-RoPE repeats the value on every axis.
PositionIds InMode(const PositionIds& p, PositionMode mode) {
  if (p.mode == mode) return p;
  PositionIds out;
  out.mode = mode;
  out.length = p.length;
  const auto S = static_cast<size_t>(p.length);
  if (mode == PositionMode::k1D) {
    out.data.assign(p.data.begin(), p.data.begin() + static_cast<std::ptrdiff_t>(S));
  } else {
    out.data.reserve(3 * S);
    for (int axis = 0; axis < 3; ++axis)
      out.data.insert(out.data.end(), p.data.begin(), p.data.end());
  }
  return out;
}

}  // namespace

Status CheckDraftModel(const LoadedModel& target, const LoadedModel& draft, int slots) {
  if (draft.config().vocab != target.config().vocab) {
    return InvalidArgument("draft model: vocabulary of " + std::to_string(draft.config().vocab) +
                           " tokens, but the model's has " + std::to_string(target.config().vocab) +
                           " (a draft model must share the model's tokenizer)");
  }
  if (draft.bounds().slots < slots) {
    return InvalidArgument("draft model: loaded for " + std::to_string(draft.bounds().slots) +
                           " slot(s), the engine has " + std::to_string(slots));
  }
  return Status::Ok();
}

ModelDrafter::ModelDrafter(const LoadedModel& draft, int slots) : draft_(draft) {
  states_.resize(static_cast<size_t>(slots));
  for (State& s : states_) s.session = std::make_unique<Session>(draft);
}

Status ModelDrafter::Begin(int slot, const PromptView& prompt) {
  State& st = states_.at(static_cast<size_t>(slot));
  st.active = false;
  st.session->Reset();
  if (prompt.tokens.empty() || prompt.positions == nullptr) {
    return InvalidArgument("draft model: the prompt has no token ids");
  }
  const PositionIds positions = InMode(*prompt.positions, draft_.config().position_mode);
  std::vector<float> logits;
  VLS_RETURN_IF_ERROR(
      st.session->PrefillTokens(prompt.tokens, positions, prompt.rope_delta, {}, &logits));
  st.active = true;
  return Status::Ok();
}

void ModelDrafter::Forget(int slot) {
  State& st = states_.at(static_cast<size_t>(slot));
  st.active = false;
  st.session->Reset();
}

bool ModelDrafter::Active(int slot) const { return states_.at(static_cast<size_t>(slot)).active; }

int64_t ModelDrafter::Room(int slot, int64_t length) const {
  const State& st = states_.at(static_cast<size_t>(slot));
  return st.active ? st.session->capacity() - length : 0;
}

int32_t ModelDrafter::Argmax(std::span<const float> row) const {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<int32_t> ModelDrafter::CatchUp(std::span<const Job> jobs) {
  const size_t V = static_cast<size_t>(draft_.config().vocab);
  std::vector<int32_t> first(jobs.size(), -1);
  std::vector<size_t> which;  // jobs with a run
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens, counts;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    State& st = states_.at(static_cast<size_t>(j.slot));
    if (!st.active || j.generated.empty()) continue;
    // The draft cache holds the prompt and generated[0, have); the run is generated[have, end).
    const int64_t have = st.session->length() - static_cast<int64_t>(j.prompt.size());
    if (have < 0 || have >= static_cast<int64_t>(j.generated.size())) {
      Forget(j.slot);  // out of step: never expected
      continue;
    }
    which.push_back(i);
    sessions.push_back(st.session.get());
    tokens.insert(tokens.end(), j.generated.begin() + have, j.generated.end());
    counts.push_back(static_cast<int32_t>(static_cast<int64_t>(j.generated.size()) - have));
  }
  if (which.empty()) return first;
  std::vector<float> logits;
  if (Session::DecodeRuns(sessions, tokens, counts, &logits).ok()) {
    size_t row = 0;
    for (size_t r = 0; r < which.size(); ++r) {
      row += static_cast<size_t>(counts[r]);
      first[which[r]] = Argmax(std::span<const float>(logits).subspan((row - 1) * V, V));
    }
    return first;
  }
  // One failing session must not stop the others' drafts: each alone.
  size_t offset = 0;
  for (size_t r = 0; r < which.size(); ++r) {
    const auto n = static_cast<size_t>(counts[r]);
    Session* one = sessions[r];
    std::vector<float> own;
    if (Session::DecodeRuns(std::span<Session* const>(&one, 1),
                            std::span<const int32_t>(tokens).subspan(offset, n),
                            std::span<const int32_t>(&counts[r], 1), &own)
            .ok()) {
      first[which[r]] = Argmax(std::span<const float>(own).subspan((n - 1) * V, V));
    } else {
      Forget(jobs[which[r]].slot);
    }
    offset += n;
  }
  return first;
}

void ModelDrafter::Draft(std::span<const Job> jobs, std::vector<std::vector<int32_t>>* drafts) {
  drafts->assign(jobs.size(), {});
  const std::vector<int32_t> first = CatchUp(jobs);
  std::vector<size_t> going;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (first[i] < 0 || jobs[i].limit < 1) continue;
    (*drafts)[i].push_back(first[i]);
    if (jobs[i].limit > 1) going.push_back(i);
  }
  const size_t V = static_cast<size_t>(draft_.config().vocab);
  // Token t of every draft still going, in one pass: feed each draft's last token.
  while (!going.empty()) {
    std::vector<Session*> sessions;
    std::vector<int32_t> tokens;
    for (const size_t i : going) {
      sessions.push_back(states_[static_cast<size_t>(jobs[i].slot)].session.get());
      tokens.push_back((*drafts)[i].back());
    }
    std::vector<float> logits;
    if (!Session::DecodeBatch(sessions, tokens, &logits).ok()) {
      // Keep what was drafted; the cache rows fed so far stay consistent with it.
      return;
    }
    std::vector<size_t> next;
    for (size_t r = 0; r < going.size(); ++r) {
      std::vector<int32_t>& d = (*drafts)[going[r]];
      d.push_back(Argmax(std::span<const float>(logits).subspan(r * V, V)));
      if (static_cast<int>(d.size()) < jobs[going[r]].limit) next.push_back(going[r]);
    }
    going = std::move(next);
  }
}

void ModelDrafter::Keep(int slot, int64_t length) {
  State& st = states_.at(static_cast<size_t>(slot));
  if (!st.active) return;
  if (length < st.session->length()) st.session->Rewind(static_cast<int>(length));
}

}  // namespace vls
