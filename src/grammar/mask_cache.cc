#include "grammar/mask_cache.h"

#include <algorithm>
#include <string_view>

namespace vls::grammar {
namespace {

constexpr int32_t kBottomKey = -1;

std::atomic<size_t> g_uncertain_limit{kUncertainLimit};

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
  }
}

// The stack a context key stands for: keys[0] the top's position, keys[1..] its frames' from
// the top down, ending in kBottomKey when the stack ends there (else in kContext).
StackTop StartFromKeys(std::span<const int32_t> keys, std::vector<Frame>* arena) {
  int32_t parent = kContext;
  size_t n = keys.size();
  if (keys[n - 1] == kBottomKey) {
    parent = kBottom;
    --n;
  }
  for (size_t i = n; i-- > 1;) {
    arena->push_back(Frame{keys[i], parent});
    parent = static_cast<int32_t>(arena->size()) - 1;
  }
  return StackTop{keys[0], parent};
}

}  // namespace

void SetUncertainLimitForTesting(size_t limit) { g_uncertain_limit.store(limit); }

MaskCache::MaskCache(const ByteGrammar* g, const TokenTrie* trie, const TokenVocab* vocab)
    : g_(g),
      trie_(trie),
      vocab_(vocab),
      uncertain_limit_(g_uncertain_limit.load()),
      roots_(std::make_unique<std::atomic<MaskEntry*>[]>(g->elems.size())) {
  for (size_t i = 0; i < g->elems.size(); ++i) roots_[i].store(nullptr);
}

MaskCache::~MaskCache() {
  for (size_t i = 0; i < g_->elems.size(); ++i) delete roots_[i].load();
}

// Walks the whole trie from one stack. Tokens a path consumes are accepted; tokens no path gets
// through are rejected unless some path left into kContext on the way (uncertain).
template <typename OnFate>
static void WalkTrie(const TokenTrie& trie, StackTop start, std::vector<Frame>* arena,
                     MaskScratch* s, OnFate&& on_fate) {
  StackEngine& engine = *s->engine;
  Reserve(s, static_cast<size_t>(trie.max_depth));
  s->depth[0].Clear();
  s->depth[0].tops.push_back(start);
  s->context[0] = 0;
  s->arena_at[0] = arena->size();
  const auto& nodes = trie.nodes;
  auto subtree_tokens_end = [&](size_t i) {
    const auto end = static_cast<size_t>(nodes[i].subtree_end);
    return end < nodes.size() ? nodes[end].tok_begin : static_cast<int32_t>(trie.token_ids.size());
  };
  size_t i = 0;
  while (i < nodes.size()) {
    const TokenTrie::Node& n = nodes[i];
    const size_t d = n.depth;
    arena->resize(s->arena_at[d - 1]);
    StackSet& set = s->depth[d];
    engine.Advance(s->depth[d - 1].tops, n.byte, arena, &set);
    s->arena_at[d] = arena->size();
    const bool context = s->context[d - 1] != 0 || set.hit_context || set.overflow;
    s->context[d] = context ? 1 : 0;
    if (set.overflow || set.tops.empty()) {
      // Nothing below can be consumed here: the subtree is uncertain or rejected.
      const bool here = !set.overflow && set.can_end;
      for (int32_t t = n.tok_begin; t < n.tok_end; ++t) {
        on_fate(trie.token_ids[static_cast<size_t>(t)],
                here ? Fate::kAccepted : (context ? Fate::kUncertain : Fate::kRejected));
      }
      if (context) {
        const int32_t end = subtree_tokens_end(i);
        for (int32_t t = n.tok_end; t < end; ++t) {
          on_fate(trie.token_ids[static_cast<size_t>(t)], Fate::kUncertain);
        }
      }
      i = static_cast<size_t>(n.subtree_end);
      continue;
    }
    for (int32_t t = n.tok_begin; t < n.tok_end; ++t) {
      on_fate(trie.token_ids[static_cast<size_t>(t)], Fate::kAccepted);
    }
    ++i;
  }
  arena->resize(s->arena_at[0]);
}

// The same over a list of tokens in trie order (sharing the states of common prefixes);
// `skip(id)` leaves a token out.
template <typename Skip, typename OnFate>
static void WalkList(const TokenVocab& vocab, int max_depth, StackTop start,
                     std::span<const int32_t> tokens, std::vector<Frame>* arena, MaskScratch* s,
                     Skip&& skip, OnFate&& on_fate) {
  StackEngine& engine = *s->engine;
  Reserve(s, static_cast<size_t>(max_depth));
  s->depth[0].Clear();
  s->depth[0].tops.push_back(start);
  s->context[0] = 0;
  s->arena_at[0] = arena->size();
  std::string_view prev;
  size_t valid = 0;  // states [0, valid] hold prev's prefixes
  for (int32_t id : tokens) {
    if (skip(id)) continue;
    const std::string_view b = vocab.bytes[static_cast<size_t>(id)];
    size_t lcp = 0;
    while (lcp < valid && lcp < b.size() && prev[lcp] == b[lcp]) ++lcp;
    size_t d = lcp;
    while (d < b.size()) {
      const StackSet& from = s->depth[d];
      if (from.overflow || from.tops.empty()) break;
      arena->resize(s->arena_at[d]);
      StackSet& set = s->depth[d + 1];
      engine.Advance(from.tops, static_cast<uint8_t>(b[d]), arena, &set);
      s->arena_at[d + 1] = arena->size();
      s->context[d + 1] = (s->context[d] != 0 || set.hit_context || set.overflow) ? 1 : 0;
      ++d;
    }
    valid = d;
    prev = b;
    const StackSet& last = s->depth[d];
    if (d == b.size() && !last.overflow && (!last.tops.empty() || last.can_end)) {
      on_fate(id, Fate::kAccepted);
    } else {
      on_fate(id, s->context[d] != 0 ? Fate::kUncertain : Fate::kRejected);
    }
  }
  arena->resize(s->arena_at[0]);
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
  WalkTrie(*trie_, StackTop{pos, kContext}, arena, scratch, [&](int32_t id, Fate f) {
    if (f == Fate::kAccepted) accepted.push_back(id);
    if (f == Fate::kUncertain) fresh->uncertain.push_back(id);
  });
  Store(std::move(accepted), fresh.get());
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
  const size_t mark = arena->size();
  const StackTop start = StartFromKeys(scratch->keys, arena);
  WalkList(
      *vocab_, trie_->max_depth, start, parent->uncertain, arena, scratch,
      [](int32_t) { return false; },
      [&](int32_t id, Fate f) {
        if (f == Fate::kAccepted) accepted.push_back(id);
        if (f == Fate::kUncertain) fresh->uncertain.push_back(id);
      });
  arena->resize(mark);
  Store(std::move(accepted), fresh.get());
  std::lock_guard<std::mutex> lock(parent->mu);
  auto [it, inserted] = parent->children.emplace(key, std::move(fresh));
  return it->second.get();
}

void MaskCache::FillMask(std::span<const StackTop> tops, std::vector<Frame>* arena,
                         MaskScratch* scratch, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
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
    WalkList(
        *vocab_, trie_->max_depth, top, e->uncertain, arena, scratch,
        [&](int32_t id) { return HasBit(mask, id); },
        [&](int32_t id, Fate f) {
          if (f == Fate::kAccepted) SetBit(mask, id);
        });
  }
  arena->resize(arena_base);
}

}  // namespace vls::grammar
