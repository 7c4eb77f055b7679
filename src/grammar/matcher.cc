// CompiledGrammar and GrammarMatcher (matcher.h): the byte grammar, the token trie and the mask
// cache behind the public interface.
//
// Bounds (byte_stacks.h): a state holds at most kMaxStacks (16384) stacks and one byte's closure
// takes at most kMaxClosureWork (262144) steps. A token whose bytes would pass either is refused
// by AcceptToken / AcceptBytes, which leave the state as it was (still usable: other tokens, and
// Rollback, work as before). Only a grammar ambiguous enough to double its stacks again and
// again gets there; the mask is computed per stack, so near the bound it may allow a token that
// AcceptToken then refuses, which the caller treats as the end of constrained decoding.
// Tokens that are not usable, are empty or longer than 65535 bytes are never allowed.
#include "grammar/matcher.h"

#include <algorithm>
#include <utility>

#include "grammar/byte_grammar.h"
#include "grammar/byte_stacks.h"
#include "grammar/mask_cache.h"
#include "grammar/token_trie.h"

namespace vls::grammar {

struct CompiledGrammar::Impl {
  Grammar grammar;
  std::shared_ptr<const TokenVocab> vocab;
  ByteGrammar bytes;
  std::shared_ptr<const TokenTrie> trie;
  std::unique_ptr<MaskCache> cache;
};

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;

const TokenVocab& CompiledGrammar::vocab() const { return *impl_->vocab; }
const Grammar& CompiledGrammar::grammar() const { return impl_->grammar; }

StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(
    const Grammar& g, std::shared_ptr<const TokenVocab> vocab, const GrammarLimits& limits) {
  if (vocab == nullptr) return InvalidArgument("grammar: no vocabulary");
  VLS_RETURN_IF_ERROR(ValidateGrammar(g, limits));
  auto impl = std::make_unique<Impl>();
  impl->grammar = g;
  VLS_ASSIGN_OR_RETURN(impl->bytes, LowerToBytes(g, limits));
  impl->trie = TokenTrie::ForVocab(vocab);
  impl->vocab = std::move(vocab);
  impl->cache = std::make_unique<MaskCache>(&impl->bytes, impl->trie.get(), impl->vocab.get());
  return std::shared_ptr<const CompiledGrammar>(new CompiledGrammar(std::move(impl)));
}

// History: step k's stacks are tops[step_begin[k], step_begin[k + 1]) (the last step ends at
// tops.size()), with its can_end flag and the arena size when it was reached (later frames
// belong to later steps and go on Rollback).
struct GrammarMatcher::State {
  std::shared_ptr<const CompiledGrammar> compiled;
  const CompiledGrammar::Impl* g = nullptr;
  StackEngine engine;
  std::vector<Frame> arena;
  std::vector<StackTop> tops;
  std::vector<size_t> step_begin;
  std::vector<uint8_t> step_can_end;
  std::vector<size_t> step_arena;
  StackSet cur;
  StackSet next;
  MaskScratch scratch;

  explicit State(std::shared_ptr<const CompiledGrammar> c)
      : compiled(std::move(c)), g(compiled->impl_.get()), engine(&g->bytes) {}

  std::span<const StackTop> CurrentTops() const {
    return std::span<const StackTop>(tops).subspan(step_begin.back());
  }
  bool CurrentCanEnd() const { return step_can_end.back() != 0; }

  void Push(const StackSet& s) {
    step_begin.push_back(tops.size());
    tops.insert(tops.end(), s.tops.begin(), s.tops.end());
    step_can_end.push_back(s.can_end ? 1 : 0);
    step_arena.push_back(arena.size());
  }

  bool Accept(std::string_view bytes) {
    const size_t arena_mark = arena.size();
    cur.Clear();
    const std::span<const StackTop> now = CurrentTops();
    cur.tops.assign(now.begin(), now.end());
    cur.can_end = CurrentCanEnd();
    for (char c : bytes) {
      engine.Advance(cur.tops, static_cast<uint8_t>(c), &arena, &next);
      if (!next.Alive()) {
        arena.resize(arena_mark);
        return false;
      }
      std::swap(cur, next);
    }
    Push(cur);
    return true;
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : state_(std::make_unique<State>(std::move(grammar))) {
  StackSet start;
  state_->engine.Start(state_->g->bytes.root, kBottom, &state_->arena, &start);
  // A validated grammar cannot overflow at its start; if it did, the state refuses every byte.
  if (start.overflow) start = StackSet{};
  state_->Push(start);
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::FillNextTokenMask(std::span<uint32_t> mask) {
  State& s = *state_;
  s.g->cache->FillMask(s.CurrentTops(), &s.arena, &s.scratch, mask);
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const CompiledGrammar::Impl& g = *state_->g;
  if (id < 0 || id >= g.vocab->size()) return false;
  // Only the tokens of the trie can be produced (usable, non-empty, at most 65535 bytes), so
  // that AcceptToken and the mask agree.
  if (g.trie->trie_order[static_cast<size_t>(id)] < 0) return false;
  return state_->Accept(g.vocab->bytes[static_cast<size_t>(id)]);
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) { return state_->Accept(bytes); }

bool GrammarMatcher::CanEnd() const { return state_->CurrentCanEnd(); }

bool GrammarMatcher::MustEnd() const { return CanEnd() && state_->CurrentTops().empty(); }

void GrammarMatcher::Rollback(int steps) {
  State& s = *state_;
  const int n = std::clamp(steps, 0, this->steps());
  if (n == 0) return;
  const size_t keep = s.step_begin.size() - static_cast<size_t>(n);
  s.tops.resize(s.step_begin[keep]);
  s.arena.resize(s.step_arena[keep - 1]);
  s.step_begin.resize(keep);
  s.step_can_end.resize(keep);
  s.step_arena.resize(keep);
}

int GrammarMatcher::steps() const { return static_cast<int>(state_->step_begin.size()) - 1; }

}  // namespace vls::grammar
