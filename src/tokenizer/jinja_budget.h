// The budget of one render (RenderLimits in jinja_template.h), shared by the evaluator, the
// filters and the value primitives. Primitives that cannot return a Status (Equal, Less, Repr)
// spend from it and stop early once it is spent; the budget stays exhausted and the evaluator
// turns that into the error at its next check.
//
// Thread safety: Template::Render installs its budget as the current one of its thread for the
// length of the render (renders on other threads have their own); code running outside a render
// sees no budget: steps are free and strings are held to kMaxRenderOutputBytes.
#ifndef VLSTACK_TOKENIZER_JINJA_BUDGET_H_
#define VLSTACK_TOKENIZER_JINJA_BUDGET_H_

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "tokenizer/jinja_template.h"

namespace vls::jinja {

class RenderBudget {
 public:
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();  // uninstalls
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  const RenderLimits& limits() const { return limits_; }
  // OK, or the error of the first limit passed.
  const Status& status() const { return status_; }
  bool exhausted() const { return !status_.ok(); }

  // Spends `n` steps; false once the budget is exhausted.
  bool Spend(int64_t n);
  // Checks that a string of `bytes` may be built by `what` (before allocating it), and spends
  // `new_bytes` (those it allocates; all of them unless it grows an existing string) from the
  // allocation budget.
  Status ChargeString(uint64_t bytes, std::string_view what, uint64_t new_bytes);
  // The same for a list of `n` items: n steps and n values' bytes.
  Status ChargeItems(uint64_t n, std::string_view what);

  static RenderBudget* Current();

 private:
  RenderLimits limits_;
  int64_t steps_ = 0;
  int64_t alloc_bytes_ = 0;
  Status status_;
  RenderBudget* previous_;
};

// The current budget's versions of the calls above (see the thread-safety note).
bool SpendSteps(int64_t n);
// Steps for scanning or copying `bytes` of text: one per 16 bytes, at least one.
bool SpendBytes(uint64_t bytes);
Status CheckString(uint64_t bytes, std::string_view what);
Status CheckGrowString(uint64_t bytes, std::string_view what, uint64_t new_bytes);
Status CheckItems(uint64_t n, std::string_view what);
// The largest string the current render may build.
uint64_t MaxStringBytes();

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_BUDGET_H_
