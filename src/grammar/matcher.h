// Running a grammar over a tokenizer's vocabulary: which tokens may come next, and the state
// after each accepted token (docs/structured_output.md).
//
// CompiledGrammar is a validated Grammar lowered to bytes (each character class becomes the
// UTF-8 byte sequences of its code points, so tokens that end inside a character are handled)
// together with a per-vocabulary token-mask cache: for each grammar position, the tokens that
// are accepted or rejected whatever the stack below it holds, and the few whose fate depends on
// it (checked at run time through a trie of the tokens' bytes). It is immutable once built apart
// from that cache, which fills lazily and is safe to share between threads and requests.
//
// GrammarMatcher is one request's state: a set of pushdown stacks. Not thread-safe; one per
// request, used by one thread at a time.
#ifndef VLSTACK_GRAMMAR_MATCHER_H_
#define VLSTACK_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace vls::grammar {

// What each token id writes, in bytes. Immutable; share one per model.
struct TokenVocab {
  // [V] the bytes of each token id (the model's vocabulary size V, which may exceed the
  // tokenizer's: ids without a token have empty bytes and usable = 0).
  std::vector<std::string> bytes;
  // [V] 1 where a grammar may produce the token: ordinary (byte-level) tokens and added tokens
  // that are not special. Special tokens (end of turn, EOS, vision markers) are never produced by
  // a grammar; the caller allows its end tokens where GrammarMatcher::CanEnd().
  std::vector<uint8_t> usable;

  int32_t size() const { return static_cast<int32_t>(bytes.size()); }
};

// Words of a token bitmask over V tokens: bit (id % 32) of word id / 32, 1 = allowed.
inline size_t MaskWords(int32_t vocab) { return (static_cast<size_t>(vocab) + 31) / 32; }
inline bool MaskAllows(std::span<const uint32_t> mask, int32_t id) {
  return ((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u) != 0;
}

class CompiledGrammar {
 public:
  // Validates `g` (ValidateGrammar), lowers it to bytes and prepares the mask cache for `vocab`.
  static StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(
      const Grammar& g, std::shared_ptr<const TokenVocab> vocab, const GrammarLimits& limits);

  ~CompiledGrammar();
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const TokenVocab& vocab() const;
  const Grammar& grammar() const;

  struct Impl;

 private:
  explicit CompiledGrammar(std::unique_ptr<Impl> impl);
  friend class GrammarMatcher;
  std::unique_ptr<Impl> impl_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // mask: [MaskWords(V)]. Sets exactly the bits of the usable tokens whose bytes can follow
  // what has been accepted (a token may end inside a UTF-8 character or a rule). End tokens
  // are not covered: allow them where CanEnd().
  void FillNextTokenMask(std::span<uint32_t> mask);

  // Accepts a usable token whose bytes can follow; false (and no change) otherwise.
  bool AcceptToken(int32_t id);
  // The same for raw bytes (tests, prefixes); the bytes count as one step for Rollback.
  bool AcceptBytes(std::string_view bytes);

  // The text accepted so far is a complete sentence of the grammar.
  bool CanEnd() const;
  // CanEnd() and no byte can follow: only an end token may come next.
  bool MustEnd() const;

  // Undoes the last `steps` AcceptToken/AcceptBytes calls (speculative decoding's rejected
  // drafts). REQUIRES: steps <= steps().
  void Rollback(int steps);
  int steps() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_MATCHER_H_
