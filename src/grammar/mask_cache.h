// Token masks for a set of stacks (grammar/matcher.h). Private to the grammar layer.
#ifndef VLSTACK_GRAMMAR_MASK_CACHE_H_
#define VLSTACK_GRAMMAR_MASK_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/byte_grammar.h"
#include "grammar/byte_stacks.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace vls::grammar {

// Per-matcher scratch for mask walks.
struct MaskScratch {
  std::unique_ptr<StackEngine> engine;
  std::vector<StackSet> depth;  // [d] the stacks after a trie node's d bytes
};

class MaskCache {
 public:
  MaskCache(const ByteGrammar* g, const TokenTrie* trie) : g_(g), trie_(trie) {}

  // Sets in `mask` ([MaskWords(V)], cleared first) the tokens that can follow `tops`. The arena
  // is used for scratch frames and left at its size.
  void FillMask(std::span<const StackTop> tops, std::vector<Frame>* arena, MaskScratch* scratch,
                std::span<uint32_t> mask) const;

 private:
  const ByteGrammar* g_;
  const TokenTrie* trie_;
};

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_MASK_CACHE_H_
