// BatchEngine's structured output: the token mask of each grammar-constrained row, computed on a
// helper thread while the decode pass runs, end tokens allowed only where the grammar may end,
// and drafts cut where the grammar refuses them (docs/structured_output.md). The sampling and
// finishing rules that use them are in batch_engine.cc and batch_engine_decode.cc.
#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "runtime/batch_engine.h"

namespace vls {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void SetBit(std::vector<uint32_t>* mask, int32_t id, bool on) {
  const size_t w = static_cast<size_t>(id) >> 5;
  if (id < 0 || w >= mask->size()) return;
  const uint32_t bit = 1u << (id & 31);
  (*mask)[w] = on ? ((*mask)[w] | bit) : ((*mask)[w] & ~bit);
}

}  // namespace

bool BatchEngine::IsEndToken(const Slot& slot, int32_t token) const {
  const auto& eos = model_.config().eos_token_ids;
  const auto& stop = slot.request.stop_token_ids;
  return (!slot.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) ||
         std::find(stop.begin(), stop.end(), token) != stop.end();
}

void BatchEngine::FillMask(Slot& slot) const {
  const uint64_t t0 = NowNs();
  try {
    slot.mask.assign(grammar::MaskWords(model_.config().vocab), 0u);
    slot.matcher->FillNextTokenMask(slot.mask);
    // End tokens where the grammar may end, never elsewhere (even one the grammar could write).
    const bool can_end = slot.matcher->CanEnd();
    if (!slot.request.ignore_eos) {
      for (int32_t id : model_.config().eos_token_ids) SetBit(&slot.mask, id, can_end);
    }
    for (int32_t id : slot.request.stop_token_ids) SetBit(&slot.mask, id, can_end);
    slot.mask_ready = true;
  } catch (const std::exception& e) {
    slot.mask_error =
        std::string("structured output: computing the token mask failed: ") + e.what();
  } catch (...) {
    slot.mask_error = "structured output: computing the token mask failed";
  }
  slot.mask_ns = NowNs() - t0;
}

bool BatchEngine::MaskFor(Slot& slot, std::span<const uint32_t>* mask, std::string* error) {
  *mask = {};
  if (!slot.matcher) return true;
  if (!slot.mask_ready && slot.mask_error.empty()) {
    FillMask(slot);
    ++masks_;
    mask_ns_ += slot.mask_ns;
    mask_wait_ns_ += slot.mask_ns;
  }
  if (!slot.mask_error.empty()) {
    *error = slot.mask_error;
    return false;
  }
  const bool any = std::any_of(slot.mask.begin(), slot.mask.end(), [](uint32_t w) { return w; });
  if (!any) {
    *error = Internal("structured output: the grammar allows no token after " +
                      std::to_string(slot.generated.size()) + " generated tokens")
                 .ToString();
    return false;
  }
  *mask = slot.mask;
  return true;
}

void BatchEngine::TruncateDraft(Slot& slot, std::vector<int32_t>* draft) const {
  if (!slot.matcher || draft->empty()) return;
  grammar::GrammarMatcher& m = *slot.matcher;
  size_t keep = 0;
  int accepted = 0;
  for (; keep < draft->size(); ++keep) {
    const int32_t t = (*draft)[keep];
    if (IsEndToken(slot, t)) {
      if (m.CanEnd()) ++keep;  // it may end here; nothing after it counts
      break;
    }
    if (!m.AcceptToken(t)) break;
    ++accepted;
    if (m.MustEnd()) {
      ++keep;
      break;
    }
  }
  m.Rollback(accepted);
  draft->resize(keep);
}

void BatchEngine::StartMasks(std::span<Slot* const> rows, std::thread* worker,
                             std::vector<Slot*>* started) {
  started->clear();
  for (Slot* s : rows) {
    if (s->matcher && !s->mask_ready && s->mask_error.empty()) started->push_back(s);
  }
  if (started->empty()) return;
  try {
    std::vector<Slot*> work = *started;
    *worker = std::thread([this, work = std::move(work)] {
      for (Slot* s : work) FillMask(*s);
    });
  } catch (...) {  // no thread (or no memory for its list): the masks are computed when needed
    started->clear();
  }
}

void BatchEngine::JoinMasks(std::thread* worker, std::span<Slot* const> started) {
  if (!worker->joinable()) return;
  const uint64_t t0 = NowNs();
  worker->join();
  mask_wait_ns_ += NowNs() - t0;
  for (const Slot* s : started) {
    ++masks_;
    mask_ns_ += s->mask_ns;
  }
}

}  // namespace vls
