#include "tokenizer/jinja_budget.h"

#include <string>

namespace vls::jinja {
namespace {

thread_local RenderBudget* g_current = nullptr;

}  // namespace

RenderBudget::RenderBudget(const RenderLimits& limits) : limits_(limits), previous_(g_current) {
  g_current = this;
}

RenderBudget::~RenderBudget() { g_current = previous_; }

RenderBudget* RenderBudget::Current() { return g_current; }

bool RenderBudget::Spend(int64_t n) {
  if (!status_.ok()) return false;
  if (n > limits_.max_steps - steps_) {
    steps_ = limits_.max_steps;
    status_ = ResourceExhausted("template rendering passed kMaxRenderSteps (" +
                                std::to_string(limits_.max_steps) +
                                " steps: expressions, loop iterations and list items)");
    return false;
  }
  steps_ += n;
  return true;
}

Status RenderBudget::ChargeString(uint64_t bytes, std::string_view what, uint64_t new_bytes) {
  if (!status_.ok()) return status_;
  const auto max = static_cast<uint64_t>(limits_.max_output_bytes);
  if (bytes > max) {
    // Not sticky: a template may catch nothing, but the caller fails this render anyway.
    return ResourceExhausted(std::string(what) + " would build a string of " +
                             std::to_string(bytes) + " bytes, past kMaxRenderOutputBytes (" +
                             std::to_string(max) + ")");
  }
  if (new_bytes > static_cast<uint64_t>(limits_.max_alloc_bytes - alloc_bytes_)) {
    alloc_bytes_ = limits_.max_alloc_bytes;
    status_ = ResourceExhausted(std::string(what) + ": template rendering allocated past " +
                                "kMaxRenderAllocBytes (" + std::to_string(limits_.max_alloc_bytes) +
                                " bytes)");
    return status_;
  }
  alloc_bytes_ += static_cast<int64_t>(new_bytes);
  return Status::Ok();
}

Status RenderBudget::ChargeItems(uint64_t n, std::string_view what) {
  if (!status_.ok()) return status_;
  const uint64_t limit = static_cast<uint64_t>(limits_.max_alloc_bytes) / sizeof(Value);
  if (n > limit ||
      static_cast<int64_t>(n * sizeof(Value)) > limits_.max_alloc_bytes - alloc_bytes_) {
    alloc_bytes_ = limits_.max_alloc_bytes;
    status_ = ResourceExhausted(std::string(what) + " would build a list of " + std::to_string(n) +
                                " items: template rendering allocated past kMaxRenderAllocBytes (" +
                                std::to_string(limits_.max_alloc_bytes) + " bytes)");
    return status_;
  }
  if (!Spend(static_cast<int64_t>(n))) return status_;
  alloc_bytes_ += static_cast<int64_t>(n * sizeof(Value));
  return Status::Ok();
}

bool SpendSteps(int64_t n) { return g_current == nullptr || g_current->Spend(n); }

bool SpendBytes(uint64_t bytes) { return SpendSteps(1 + static_cast<int64_t>(bytes / 16)); }

Status CheckString(uint64_t bytes, std::string_view what) {
  return CheckGrowString(bytes, what, bytes);
}

Status CheckGrowString(uint64_t bytes, std::string_view what, uint64_t new_bytes) {
  if (g_current != nullptr) return g_current->ChargeString(bytes, what, new_bytes);
  if (bytes > static_cast<uint64_t>(kMaxRenderOutputBytes)) {
    return ResourceExhausted(std::string(what) + " would build a string of " +
                             std::to_string(bytes) + " bytes, past kMaxRenderOutputBytes (" +
                             std::to_string(kMaxRenderOutputBytes) + ")");
  }
  return Status::Ok();
}

Status CheckItems(uint64_t n, std::string_view what) {
  if (g_current != nullptr) return g_current->ChargeItems(n, what);
  if (n > static_cast<uint64_t>(kMaxRenderAllocBytes) / sizeof(Value)) {
    return ResourceExhausted(std::string(what) + " would build a list of " + std::to_string(n) +
                             " items, past kMaxRenderAllocBytes");
  }
  return Status::Ok();
}

uint64_t MaxStringBytes() {
  return static_cast<uint64_t>(g_current != nullptr ? g_current->limits().max_output_bytes
                                                    : kMaxRenderOutputBytes);
}

}  // namespace vls::jinja
