// Draft-model speculative decoding (docs/speculative.md): a smaller model with the same
// vocabulary drafts k tokens greedily for each speculating slot; the batch engine verifies
// them in its shared decode pass exactly as it verifies prompt-lookup drafts.
//
// Each engine slot has a draft session on the draft model. It is prefilled with the prompt
// when the slot's prompt prefill completes, then kept in step with the slot's sequence: before
// each draft the rows the target accepted since the last draft (at least the pending token) are
// fed as one run; after the verify pass the draft cache is rewound to the rows the target kept.
// The drafts of all speculating slots share one batched pass per drafted token.
//
// A draft is the argmax of the draft model's logits at every step, so it is a deterministic
// function of the tokens so far: Sampler::Verify's acceptance (accept with probability p(x),
// else draw from p without x) keeps the emitted tokens distributed as plain sampling, and
// greedy output identical to plain decoding, whatever the draft model computes.
//
// Nothing the draft model does can fail a request: a draft session that fails is forgotten and
// its slot decodes without drafts until its next request.
#ifndef VLSTACK_RUNTIME_MODEL_DRAFT_H_
#define VLSTACK_RUNTIME_MODEL_DRAFT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/loaded_model.h"
#include "runtime/request.h"
#include "runtime/session.h"

namespace vls {

// A draft model fits a target when their vocabularies have the same size and the draft's static
// bounds hold `slots` sessions; otherwise an error naming both values.
Status CheckDraftModel(const LoadedModel& target, const LoadedModel& draft, int slots);

class ModelDrafter {
 public:
  // One draft session per slot on `draft` (not owned; outlives the drafter). Throws
  // std::bad_alloc when a session's KV cache cannot be allocated.
  ModelDrafter(const LoadedModel& draft, int slots);

  // Starts slot's sequence: prefills the draft session with the prompt's token ids at the
  // prompt's positions (converted to the draft model's position mode) and delta. A prompt
  // without ids, or one the draft model refuses, leaves the slot without drafts (returned).
  Status Begin(int slot, const PromptView& prompt);
  // The slot's request ended: its draft session is not kept in step any more.
  void Forget(int slot);
  bool Active(int slot) const;
  // Most rows a draft may hold for a slot whose target sequence is `length` rows long plus the
  // pending token (the draft cache must hold length + limit rows).
  int64_t Room(int slot, int64_t length) const;

  struct Job {
    int slot = 0;
    std::span<const int32_t> prompt;     // [S] the prompt's ids
    std::span<const int32_t> generated;  // generated tokens; the last is the pending one
    int limit = 0;                       // most tokens to draft (>= 1)
  };
  // Drafts up to job.limit tokens for each job (drafts[i] for jobs[i]): one batched draft pass
  // per drafted token. A job whose slot is not active, or whose draft pass fails, gets none.
  void Draft(std::span<const Job> jobs, std::vector<std::vector<int32_t>>* drafts);
  // After the verify pass: the target keeps `length` rows of slot's sequence; the draft rows
  // past them (rejected drafts) go.
  void Keep(int slot, int64_t length);

 private:
  struct State {
    std::unique_ptr<Session> session;
    bool active = false;
  };
  // The catch-up runs (sequence rows the draft cache lacks, ending with the pending token) of
  // `jobs`, in one pass; returns each job's first draft token, or -1 where its pass failed.
  std::vector<int32_t> CatchUp(std::span<const Job> jobs);
  int32_t Argmax(std::span<const float> row) const;

  const LoadedModel& draft_;
  std::vector<State> states_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_MODEL_DRAFT_H_
