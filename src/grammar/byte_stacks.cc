#include "grammar/byte_stacks.h"

#include <algorithm>

namespace vls::grammar {
namespace {

uint64_t Key(int32_t pos, int32_t parent) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
}

uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

bool StackEngine::Visit(int32_t pos, int32_t parent) {
  const uint64_t k = Key(pos, parent);
  if (!hashed_) {
    for (size_t i = 0; i < small_n_; ++i) {
      if (small_[i] == k) return false;
    }
    if (small_n_ < kSmall) {
      small_[small_n_++] = k;
      return true;
    }
    // Past the short array: move its keys into the hashed set.
    hashed_ = true;
    if (stamp_ == UINT32_MAX) {
      std::fill(stamps_.begin(), stamps_.end(), 0);
      stamp_ = 0;
    }
    ++stamp_;
    used_ = 0;
    for (size_t i = 0; i < small_n_; ++i) HashInsert(small_[i]);
  }
  return HashInsert(k);
}

bool StackEngine::HashInsert(uint64_t k) {
  if (keys_.empty() || (used_ + 1) * 2 > keys_.size()) {
    // Grow, re-inserting this call's keys.
    const size_t cap = keys_.empty() ? 256 : keys_.size() * 2;
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<uint32_t> old_stamps = std::move(stamps_);
    keys_.assign(cap, 0);
    stamps_.assign(cap, 0);
    const uint32_t live = stamp_;
    stamp_ = 1;
    used_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_stamps[i] != live) continue;
      size_t h = Mix(old_keys[i]) & (cap - 1);
      while (stamps_[h] == stamp_) h = (h + 1) & (cap - 1);
      keys_[h] = old_keys[i];
      stamps_[h] = stamp_;
      ++used_;
    }
  }
  const size_t mask = keys_.size() - 1;
  size_t h = Mix(k) & mask;
  while (stamps_[h] == stamp_) {
    if (keys_[h] == k) return false;
    h = (h + 1) & mask;
  }
  keys_[h] = k;
  stamps_[h] = stamp_;
  ++used_;
  return true;
}

void StackEngine::Closure(std::vector<Frame>* arena, StackSet* out) {
  const std::vector<int32_t>& elems = g_->elems;
  size_t steps = 0;
  while (!work_.empty()) {
    const StackTop t = work_.back();
    work_.pop_back();
    if (!Visit(t.pos, t.parent)) continue;
    if (++steps > kMaxClosureWork || out->tops.size() > kMaxStacks) {
      out->overflow = true;
      work_.clear();
      return;
    }
    const int32_t code = elems[static_cast<size_t>(t.pos)];
    if (ByteGrammar::IsSet(code)) {
      if (!g_->sets[static_cast<size_t>(code)].Empty()) out->tops.push_back(t);
    } else if (code == ByteGrammar::kEnd) {
      if (t.parent == kBottom) {
        out->can_end = true;
      } else if (t.parent == kContext) {
        out->hit_context = true;
      } else {
        work_.push_back((*arena)[static_cast<size_t>(t.parent)]);
      }
    } else {
      const int32_t rule = ByteGrammar::RuleOf(code);
      int32_t ret = t.parent;
      if (elems[static_cast<size_t>(t.pos) + 1] != ByteGrammar::kEnd) {
        ret = static_cast<int32_t>(arena->size());
        if (interner_ != nullptr) {
          auto [it, inserted] = interner_->emplace(Key(t.pos + 1, t.parent), ret);
          if (inserted) arena->push_back(Frame{t.pos + 1, t.parent});
          ret = it->second;
        } else {
          arena->push_back(Frame{t.pos + 1, t.parent});
        }
      }
      const auto begin = static_cast<size_t>(g_->alt_begin[static_cast<size_t>(rule)]);
      const auto end = static_cast<size_t>(g_->alt_begin[static_cast<size_t>(rule) + 1]);
      // Pushed in reverse so alternatives are expanded in order.
      for (size_t a = end; a-- > begin;) work_.push_back(StackTop{g_->alt_starts[a], ret});
    }
  }
}

void StackEngine::NewCall() {
  small_n_ = 0;
  hashed_ = false;
}

void StackEngine::Start(int32_t rule, int32_t parent, std::vector<Frame>* arena, StackSet* out) {
  out->Clear();
  NewCall();
  const auto begin = static_cast<size_t>(g_->alt_begin[static_cast<size_t>(rule)]);
  const auto end = static_cast<size_t>(g_->alt_begin[static_cast<size_t>(rule) + 1]);
  for (size_t a = end; a-- > begin;) work_.push_back(StackTop{g_->alt_starts[a], parent});
  Closure(arena, out);
}

void StackEngine::Advance(std::span<const StackTop> in, uint8_t b, std::vector<Frame>* arena,
                          StackSet* out) {
  out->Clear();
  NewCall();
  for (size_t i = in.size(); i-- > 0;) {
    const StackTop& t = in[i];
    const int32_t code = g_->elems[static_cast<size_t>(t.pos)];
    if (g_->sets[static_cast<size_t>(code)].Has(b)) work_.push_back(StackTop{t.pos + 1, t.parent});
  }
  Closure(arena, out);
}

}  // namespace vls::grammar
