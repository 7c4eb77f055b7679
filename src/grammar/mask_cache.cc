#include "grammar/mask_cache.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>

namespace vls::grammar {
namespace {

constexpr int32_t kBottomKey = -1;

std::atomic<size_t> g_uncertain_limit{kUncertainLimit};
std::atomic<size_t> g_cache_budget{kMaxCacheBytes};
std::atomic<size_t> g_walk_budget{kMaxWalkTops};

enum class Fate : uint8_t { kRejected, kAccepted, kUncertain };

void SetBit(std::span<uint32_t> mask, int32_t id) {
  mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}
bool HasBit(std::span<const uint32_t> mask, int32_t id) {
  return ((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u) != 0;
}

void Reserve(MaskScratch* s, size_t depth) {
  if (s->depth.size() < depth + 1) {
    s->depth.resize(depth + 1);
    s->context.resize(depth + 1);
    s->arena_at.resize(depth + 1);
    s->states.resize(depth + 1);
  }
}

}  // namespace

namespace {

// What a walk needs of a state: whether it can take more bytes, end, or left into kContext.
struct StateInfo {
  bool has_tops = false;
  bool can_end = false;
  bool context = false;  // the step into it left into kContext (or passed a bound)
  bool overflow = false;
};

StateInfo InfoOf(const StackSet& s) {
  return StateInfo{!s.tops.empty(), s.can_end, s.hit_context || s.overflow, s.overflow};
}

// States by depth on the caller's arena, dropped as the walk backs up: for short lists.
class PlainStepper {
 public:
  PlainStepper(MaskScratch* s, std::vector<Frame>* arena, int max_depth) : s_(s), arena_(arena) {
    Reserve(s, static_cast<size_t>(max_depth));
  }
  int32_t Start(StackTop top) {
    s_->depth[0].Clear();
    s_->depth[0].tops.push_back(top);
    s_->arena_at[0] = arena_->size();
    return 0;
  }
  // REQUIRES: `from` is the depth of the state being advanced, the deepest one still needed.
  int32_t Next(int32_t from, uint8_t b) {
    const auto d = static_cast<size_t>(from);
    arena_->resize(s_->arena_at[d]);
    s_->engine->Advance(s_->depth[d].tops, b, arena_, &s_->depth[d + 1]);
    s_->arena_at[d + 1] = arena_->size();
    return from + 1;
  }
  StateInfo Info(int32_t h) const { return InfoOf(s_->depth[static_cast<size_t>(h)]); }
  bool Exhausted() const { return false; }
  void Finish() { arena_->resize(s_->arena_at[0]); }

 private:
  MaskScratch* s_;
  std::vector<Frame>* arena_;
};

}  // namespace

// A lazily built DFA over the walks' stack sets, shared by every walk of one MaskCache (under
// its mutex): frames are hash-consed in its own arena and sets interned by content, so equal
// stacks are one state whichever walk met them first, and each state's transitions are computed
// once. Cleared between walks when it grows past kMaxStates; a walk that makes it hold more than
// kMaxWalkTops stacks stops there (Exhausted) and leaves its remaining tokens uncertain, to be
// checked against the real stacks, so a hostile grammar costs time, not unbounded memory.
class WalkDfa {
 public:
  static constexpr size_t kMaxStates = 1 << 15;

  explicit WalkDfa(const ByteGrammar* g) : engine_(g), max_held_tops_(g_walk_budget.load()) {
    engine_.SetInterner(&frames_);
  }

  void MaybeReset() {
    if (tops_.size() <= kMaxStates && arena_.size() <= kMaxStates * 16 &&
        held_tops_ <= max_held_tops_ / 4) {
      return;
    }
    held_tops_ = 0;
    arena_.clear();
    frames_.clear();
    ids_.clear();
    tops_.clear();
    info_.clear();
    dense_.clear();
    sparse_.clear();
  }
  // The top of a context key's stack (see StartFromKeys) with its frames in this DFA's arena.
  StackTop FromKeys(std::span<const int32_t> keys) {
    int32_t parent = kContext;
    size_t n = keys.size();
    if (keys[n - 1] == kBottomKey) {
      parent = kBottom;
      --n;
    }
    for (size_t i = n; i-- > 1;) {
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(keys[i])) << 32) |
                           static_cast<uint32_t>(parent);
      auto [it, inserted] = frames_.emplace(key, static_cast<int32_t>(arena_.size()));
      if (inserted) arena_.push_back(Frame{keys[i], parent});
      parent = it->second;
    }
    return StackTop{keys[0], parent};
  }
  int32_t Start(StackTop top) {
    StackSet set;
    set.tops.push_back(top);
    return Intern(&set);
  }
  int32_t Next(int32_t from, uint8_t b) {
    const auto f = static_cast<size_t>(from);
    if (f < kDenseStates) {
      const int32_t to = dense_[f * 256 + b];
      if (to >= 0) return to;
    } else {
      auto it = sparse_.find((static_cast<uint64_t>(from) << 8) | b);
      if (it != sparse_.end()) return it->second;
    }
    engine_.Advance(tops_[f], b, &arena_, &scratch_);
    const int32_t to = Intern(&scratch_);
    if (f < kDenseStates) {
      dense_[f * 256 + b] = to;
    } else {
      sparse_[(static_cast<uint64_t>(from) << 8) | b] = to;
    }
    return to;
  }
  StateInfo Info(int32_t h) const { return info_[static_cast<size_t>(h)]; }
  void Finish() {}
  bool Exhausted() const { return held_tops_ > max_held_tops_; }

 private:
  static constexpr size_t kDenseStates = 4096;

  int32_t Intern(StackSet* set) {
    std::sort(set->tops.begin(), set->tops.end(), [](const StackTop& x, const StackTop& y) {
      return x.pos < y.pos || (x.pos == y.pos && x.parent < y.parent);
    });
    key_.assign(reinterpret_cast<const char*>(set->tops.data()),
                set->tops.size() * sizeof(StackTop));
    key_.push_back(static_cast<char>((set->can_end ? 1 : 0) | (set->hit_context ? 2 : 0) |
                                     (set->overflow ? 4 : 0)));
    auto [it, inserted] = ids_.emplace(key_, static_cast<int32_t>(tops_.size()));
    if (inserted) {
      // A set past a bound is never advanced: its stacks need not be kept.
      if (set->overflow) set->tops.clear();
      held_tops_ += set->tops.size() + 1;
      tops_.push_back(set->tops);
      info_.push_back(InfoOf(*set));
      if (tops_.size() <= kDenseStates) dense_.resize(tops_.size() * 256, -1);
    }
    return it->second;
  }

  StackEngine engine_;
  std::vector<Frame> arena_;
  std::unordered_map<uint64_t, int32_t> frames_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::vector<StackTop>> tops_;
  std::vector<StateInfo> info_;
  std::vector<int32_t> dense_;
  std::unordered_map<uint64_t, int32_t> sparse_;
  StackSet scratch_;
  std::string key_;
  size_t max_held_tops_;
  size_t held_tops_ = 0;
};

namespace {

// Walks the whole trie from one stack. Tokens a path consumes are accepted; tokens no path gets
// through are rejected unless some path left into kContext on the way (uncertain).
template <typename Stepper, typename OnFate>
void WalkTrie(const TokenTrie& trie, StackTop start, Stepper* stepper, MaskScratch* s,
              OnFate&& on_fate) {
  Reserve(s, static_cast<size_t>(trie.max_depth));
  std::vector<int32_t>& st = s->states;
  st[0] = stepper->Start(start);
  s->context[0] = 0;
  const auto& nodes = trie.nodes;
  auto subtree_tokens_end = [&](size_t i) {
    const auto end = static_cast<size_t>(nodes[i].subtree_end);
    return end < nodes.size() ? nodes[end].tok_begin : static_cast<int32_t>(trie.token_ids.size());
  };
  size_t i = 0;
  while (i < nodes.size()) {
    const TokenTrie::Node& n = nodes[i];
    const size_t d = n.depth;
    st[d] = stepper->Next(st[d - 1], n.byte);
    if (stepper->Exhausted()) {
      for (auto t = static_cast<size_t>(n.tok_begin); t < trie.token_ids.size(); ++t) {
        on_fate(static_cast<int32_t>(t), Fate::kUncertain);
      }
      break;
    }
    const StateInfo info = stepper->Info(st[d]);
    const bool context = s->context[d - 1] != 0 || info.context;
    s->context[d] = context ? 1 : 0;
    if (info.overflow || !info.has_tops) {
      // Nothing below can be consumed here: the subtree is uncertain or rejected.
      const bool here = !info.overflow && info.can_end;
      for (int32_t t = n.tok_begin; t < n.tok_end; ++t) {
        on_fate(t, here ? Fate::kAccepted : (context ? Fate::kUncertain : Fate::kRejected));
      }
      if (context) {
        const int32_t end = subtree_tokens_end(i);
        for (int32_t t = n.tok_end; t < end; ++t) {
          on_fate(t, Fate::kUncertain);
        }
      }
      i = static_cast<size_t>(n.subtree_end);
      continue;
    }
    for (int32_t t = n.tok_begin; t < n.tok_end; ++t) {
      on_fate(t, Fate::kAccepted);
    }
    ++i;
  }
  stepper->Finish();
}

// The same over a list of token ranks in increasing order (sharing the states of common
// prefixes); `skip(rank)` leaves a token out.
template <typename Stepper, typename Skip, typename OnFate>
void WalkList(const TokenTrie& trie, StackTop start, std::span<const int32_t> ranks,
              Stepper* stepper, MaskScratch* s, Skip&& skip, OnFate&& on_fate) {
  Reserve(s, static_cast<size_t>(trie.max_depth));
  std::vector<int32_t>& st = s->states;
  st[0] = stepper->Start(start);
  s->context[0] = 0;
  std::string_view prev;
  size_t valid = 0;  // states [0, valid] hold prev's prefixes
  bool exhausted = false;
  for (int32_t id : ranks) {
    if (skip(id)) continue;
    if (exhausted) {
      on_fate(id, Fate::kUncertain);
      continue;
    }
    const std::string_view b = trie.RankBytes(id);
    size_t lcp = 0;
    while (lcp < valid && lcp < b.size() && prev[lcp] == b[lcp]) ++lcp;
    size_t d = lcp;
    while (d < b.size()) {
      const StateInfo from = stepper->Info(st[d]);
      if (from.overflow || !from.has_tops) break;
      st[d + 1] = stepper->Next(st[d], static_cast<uint8_t>(b[d]));
      if (stepper->Exhausted()) break;
      s->context[d + 1] = (s->context[d] != 0 || stepper->Info(st[d + 1]).context) ? 1 : 0;
      ++d;
    }
    if (stepper->Exhausted()) {
      exhausted = true;
      on_fate(id, Fate::kUncertain);
      continue;
    }
    valid = d;
    prev = b;
    const StateInfo last = stepper->Info(st[d]);
    if (d == b.size() && !last.overflow && (last.has_tops || last.can_end)) {
      on_fate(id, Fate::kAccepted);
    } else {
      on_fate(id, s->context[d] != 0 ? Fate::kUncertain : Fate::kRejected);
    }
  }
  stepper->Finish();
}

}  // namespace

void SetUncertainLimitForTesting(size_t limit) { g_uncertain_limit.store(limit); }
void SetCacheBudgetForTesting(size_t bytes) { g_cache_budget.store(bytes); }
void SetWalkBudgetForTesting(size_t tops) { g_walk_budget.store(tops); }

MaskCache::MaskCache(const ByteGrammar* g, const TokenTrie* trie, const TokenVocab* vocab)
    : g_(g),
      trie_(trie),
      vocab_(vocab),
      uncertain_limit_(g_uncertain_limit.load()),
      dfa_(std::make_unique<WalkDfa>(g)),
      budget_(g_cache_budget.load()),
      roots_(std::make_unique<std::atomic<MaskEntry*>[]>(g->elems.size())) {
  for (size_t i = 0; i < g->elems.size(); ++i) roots_[i].store(nullptr);
}

MaskCache::~MaskCache() {
  for (size_t i = 0; i < g_->elems.size(); ++i) delete roots_[i].load();
}

bool MaskCache::FitsBudget(const MaskEntry& e) const {
  const size_t bytes = sizeof(MaskEntry) + 64 +
                       sizeof(int32_t) * (e.accepted_ids.size() + e.uncertain.size()) +
                       sizeof(uint32_t) * e.accepted_bits.size();
  size_t now = bytes_.load(std::memory_order_relaxed);
  do {
    if (now + bytes > budget_) return false;
  } while (!bytes_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

void MaskCache::Store(std::vector<int32_t> accepted, MaskEntry* e) const {
  const size_t words = MaskWords(vocab_->size());
  if (accepted.size() > words) {
    e->accepted_bits.assign(words, 0);
    for (int32_t id : accepted) SetBit(e->accepted_bits, id);
  } else {
    e->accepted_ids = std::move(accepted);
  }
}

const MaskEntry* MaskCache::Root(int32_t pos, std::vector<Frame>* arena,
                                 MaskScratch* scratch) const {
  std::atomic<MaskEntry*>& slot = roots_[static_cast<size_t>(pos)];
  if (MaskEntry* e = slot.load(std::memory_order_acquire)) return e;
  auto fresh = std::make_unique<MaskEntry>();
  std::vector<int32_t> accepted;
  {
    std::lock_guard<std::mutex> lock(dfa_mu_);
    dfa_->MaybeReset();
    WalkTrie(*trie_, StackTop{pos, kContext}, dfa_.get(), scratch, [&](int32_t rank, Fate f) {
      if (f == Fate::kAccepted) accepted.push_back(trie_->token_ids[static_cast<size_t>(rank)]);
      if (f == Fate::kUncertain) fresh->uncertain.push_back(rank);
    });
  }
  Store(std::move(accepted), fresh.get());
  if (!FitsBudget(*fresh)) {
    scratch->unstored.push_back(std::move(fresh));
    return scratch->unstored.back().get();
  }
  MaskEntry* expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) {
    return fresh.release();
  }
  return expected;
}

const MaskEntry* MaskCache::Child(const MaskEntry* parent, std::vector<Frame>* arena,
                                  MaskScratch* scratch) const {
  const int32_t key = scratch->keys.back();
  {
    std::lock_guard<std::mutex> lock(parent->mu);
    auto it = parent->children.find(key);
    if (it != parent->children.end()) return it->second.get();
  }
  auto fresh = std::make_unique<MaskEntry>();
  std::vector<int32_t> accepted;
  {
    std::lock_guard<std::mutex> lock(dfa_mu_);
    dfa_->MaybeReset();
    const StackTop start = dfa_->FromKeys(scratch->keys);
    WalkList(
        *trie_, start, parent->uncertain, dfa_.get(), scratch, [](int32_t) { return false; },
        [&](int32_t rank, Fate f) {
          if (f == Fate::kAccepted) {
            accepted.push_back(trie_->token_ids[static_cast<size_t>(rank)]);
          }
          if (f == Fate::kUncertain) fresh->uncertain.push_back(rank);
        });
  }
  Store(std::move(accepted), fresh.get());
  if (!FitsBudget(*fresh)) {
    scratch->unstored.push_back(std::move(fresh));
    return scratch->unstored.back().get();
  }
  std::lock_guard<std::mutex> lock(parent->mu);
  auto [it, inserted] = parent->children.emplace(key, std::move(fresh));
  return it->second.get();
}

void MaskCache::FillMask(std::span<const StackTop> tops, std::vector<Frame>* arena,
                         MaskScratch* scratch, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  scratch->unstored.clear();
  if (tops.empty()) return;
  if (scratch->engine == nullptr) scratch->engine = std::make_unique<StackEngine>(g_);
  const size_t arena_base = arena->size();
  for (const StackTop& top : tops) {
    const MaskEntry* e = Root(top.pos, arena, scratch);
    auto add = [&](const MaskEntry* entry) {
      if (!entry->accepted_bits.empty()) {
        for (size_t w = 0; w < mask.size(); ++w) mask[w] |= entry->accepted_bits[w];
      } else {
        for (int32_t id : entry->accepted_ids) SetBit(mask, id);
      }
    };
    add(e);
    scratch->keys.assign(1, top.pos);
    int32_t frame = top.parent;
    while (e->uncertain.size() > uncertain_limit_ &&
           static_cast<int>(scratch->keys.size()) < kMaxContextDepth) {
      const bool bottom = frame == kBottom;
      scratch->keys.push_back(bottom ? kBottomKey : (*arena)[static_cast<size_t>(frame)].pos);
      e = Child(e, arena, scratch);
      add(e);
      if (bottom) break;
      frame = (*arena)[static_cast<size_t>(frame)].parent;
    }
    if (e->uncertain.empty()) continue;
    PlainStepper stepper(scratch, arena, trie_->max_depth);
    const std::vector<int32_t>& ids = trie_->token_ids;
    WalkList(
        *trie_, top, e->uncertain, &stepper, scratch,
        [&](int32_t rank) { return HasBit(mask, ids[static_cast<size_t>(rank)]); },
        [&](int32_t rank, Fate f) {
          if (f == Fate::kAccepted) SetBit(mask, ids[static_cast<size_t>(rank)]);
        });
  }
  arena->resize(arena_base);
}

}  // namespace vls::grammar
