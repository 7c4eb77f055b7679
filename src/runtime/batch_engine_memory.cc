// BatchEngine's paged KV memory (docs/contracts.md §4, ADR 0029): every slot's cache takes
// blocks from one pool as its sequence grows. Before each pass the engine makes room for the
// blocks the pass writes: first by dropping the kept rows of free slots (least recently admitted
// first), then by preempting the most recently admitted sequences. A preempted sequence gives
// its blocks back and waits; it is resumed, before anything new is admitted, once the pool has
// room for all its rows, by prefilling its prompt again and recomputing its generated tokens in
// one decode run, and then samples on exactly where it stopped (its sampler, grammar and tokens
// were kept). Its stream pauses; it never fails for want of memory.
#include <algorithm>
#include <vector>

#include "runtime/batch_engine.h"

namespace vls {

int64_t BatchEngine::RunRows(const Slot& slot) const {
  const int64_t cached = slot.session->length() - slot.prompt_length;  // generated rows held
  return std::max<int64_t>(1, static_cast<int64_t>(slot.generated.size()) - cached);
}

int64_t BatchEngine::ReclaimableBlocks() const {
  int64_t n = pool_->free_blocks();
  for (const Slot& s : slots_) {
    if (s.phase == Phase::kFree) n += s.session->kv_blocks();
  }
  return n;
}

bool BatchEngine::RoomToAdmit(const GenerationRequest& r) const {
  if (!preemptible_) return true;
  return pool_->BlocksFor(r.positions.length) <= ReclaimableBlocks();
}

bool BatchEngine::WaitsForPrefill(std::span<const RowKey> keys, int64_t S) const {
  if (!options_.prefix_reuse || S < 1) return false;
  const int64_t P = pool_->block_keys();
  const int64_t usable = (S - 1) / P;  // full blocks a prompt may take (never its last row)
  int64_t coming = 0;                  // blocks a running prefill will name
  for (const Slot& s : slots_) {
    if (s.phase != Phase::kPrefill) continue;
    const size_t n = std::min(s.kept.size(), keys.size());
    size_t match = 0;
    while (match < n && s.kept[match] == keys[match]) ++match;
    const int64_t blocks = std::min(static_cast<int64_t>(match) / P, usable);
    if (blocks * P > s.prefilled) coming = std::max(coming, blocks);
  }
  if (coming == 0) return false;
  std::vector<int32_t> ids;
  std::vector<uint64_t> hashes;
  CachedBlocks(keys, S, &ids, &hashes);
  return coming > static_cast<int64_t>(ids.size());
}

void BatchEngine::CachedBlocks(std::span<const RowKey> keys, int64_t S, std::vector<int32_t>* ids,
                               std::vector<uint64_t>* hashes) const {
  const auto P = static_cast<size_t>(pool_->block_keys());
  const size_t blocks = S > 0 ? static_cast<size_t>(S - 1) / P : 0;
  uint64_t h = 0;
  for (size_t b = 0; b < blocks && (b + 1) * P <= keys.size(); ++b) {
    h = BlockHash(h, keys.subspan(b * P, P));
    const int32_t id = pool_->Lookup(h);
    if (id < 0) return;
    ids->push_back(id);
    hashes->push_back(h);
  }
}

void BatchEngine::NameBlocks(Slot& s) {
  if (s.phase != Phase::kPrefill && s.phase != Phase::kDecode) return;
  const int64_t P = pool_->block_keys();
  const int64_t rows = s.phase == Phase::kDecode ? s.session->length() : s.prefilled;
  const int64_t full = std::min<int64_t>(rows, static_cast<int64_t>(s.kept.size())) / P;
  for (auto b = static_cast<int64_t>(s.chain.size()); b < full; ++b) {
    const uint64_t h = BlockHash(b == 0 ? 0 : s.chain.back(),
                                 std::span<const RowKey>(s.kept).subspan(static_cast<size_t>(b * P),
                                                                         static_cast<size_t>(P)));
    // A block of the same content elsewhere keeps the name; this one stays private.
    (void)pool_->Name(s.session->kv_block_id(b), h);
    s.chain.push_back(h);
  }
}

bool BatchEngine::ResumePreempted() {
  std::vector<Slot*> waiting;
  for (Slot& s : slots_) {
    if (s.phase == Phase::kPreempted) waiting.push_back(&s);
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const Slot* a, const Slot* b) { return a->admitted_seq < b->admitted_seq; });
  int64_t room = ReclaimableBlocks();
  for (Slot* s : waiting) {
    // All its rows: the prompt, its generated tokens, and the next.
    const int64_t need =
        pool_->BlocksFor(s->prompt_length + static_cast<int64_t>(s->generated.size()));
    if (need > room) return false;
    room -= need;
    s->phase = Phase::kPrefill;
    s->prefilled = 0;
    s->kept = PromptKeys(s->request);
    // Its prompt's blocks may still be in the prefix cache.
    std::vector<int32_t> shared;
    std::vector<uint64_t> hashes;
    if (options_.prefix_reuse) CachedBlocks(s->kept, s->prompt_length, &shared, &hashes);
    if (!shared.empty() && s->session->AdoptPrefix(shared, hashes)) {
      s->prefilled = s->session->valid_rows();
      s->chain = hashes;
      shared_blocks_ += shared.size();
    }
  }
  return true;
}

void BatchEngine::Preempt(Slot& slot) {
  slot.session->ReleaseMemory();
  slot.kept.clear();
  slot.chain.clear();
  slot.phase = Phase::kPreempted;
  slot.prefilled = 0;
  // The draft model's session follows the target's rows: it starts again after the resume.
  if (drafter_) drafter_->Forget(SlotIndex(slot));
  ++preemptions_;
}

void BatchEngine::MakeRoom() {
  if (!preemptible_) return;
  while (true) {
    bool decoding = false;
    int64_t need = 0;
    for (const Slot& s : slots_) {
      if (s.phase != Phase::kDecode || s.next_token < 0) continue;
      decoding = true;
      const SpeculativeParams& sp = SpecOf(s);
      const int64_t drafts = sp.draft_tokens > 0 ? std::min(sp.draft_tokens, s.draft_window) : 0;
      need +=
          std::max<int64_t>(0, s.session->KvBlocksFor(s.session->length() + RunRows(s) + drafts) -
                                   s.session->kv_blocks());
    }
    for (const auto& [s, rows] : ChooseChunks(decoding)) {
      need += std::max<int64_t>(
          0, s->session->KvBlocksFor(s->prefilled + rows) - s->session->kv_blocks());
    }
    if (need <= pool_->free_blocks()) return;
    // A free slot's kept rows first, least recently admitted first.
    Slot* victim = nullptr;
    for (Slot& s : slots_) {
      if (s.phase == Phase::kFree && s.session->kv_blocks() > 0 &&
          (victim == nullptr || s.admitted_seq < victim->admitted_seq)) {
        victim = &s;
      }
    }
    if (victim != nullptr) {
      victim->session->ReleaseMemory();
      victim->kept.clear();
      victim->chain.clear();
      ++evictions_;
      continue;
    }
    // Then the most recently admitted running sequence.
    for (Slot& s : slots_) {
      if ((s.phase == Phase::kPrefill || s.phase == Phase::kDecode) &&
          (victim == nullptr || s.admitted_seq > victim->admitted_seq)) {
        victim = &s;
      }
    }
    if (victim == nullptr) return;
    Preempt(*victim);
  }
}

}  // namespace vls
