// The usable tokens of a vocabulary as a trie of their bytes, in preorder, so a walk that finds
// a prefix impossible skips its whole subtree. Private to the grammar layer.
#ifndef VLSTACK_GRAMMAR_TOKEN_TRIE_H_
#define VLSTACK_GRAMMAR_TOKEN_TRIE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/matcher.h"

namespace vls::grammar {

struct TokenTrie {
  struct Node {
    int32_t subtree_end = 0;  // the index past this node's subtree
    int32_t tok_begin = 0;    // [tok_begin, tok_end) into token_ids: the tokens ending here
    int32_t tok_end = 0;
    uint16_t depth = 0;  // bytes from the root (>= 1); tokens longer than 65535 bytes are left out
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;          // preorder; the root (the empty prefix) is not stored
  std::vector<int32_t> token_ids;   // grouped by node
  std::vector<int32_t> trie_order;  // [V] a token's rank in preorder (-1: not in the trie)
  // The bytes of the token of each rank, back to back: [blob_offset[r], blob_offset[r + 1]).
  std::string blob;
  std::vector<uint32_t> blob_offset;  // [ranks + 1]
  std::string_view RankBytes(int32_t rank) const {
    const auto r = static_cast<size_t>(rank);
    return std::string_view(blob).substr(blob_offset[r], blob_offset[r + 1] - blob_offset[r]);
  }
  int max_depth = 0;

  static std::shared_ptr<const TokenTrie> Build(const TokenVocab& vocab);
  // The trie of `vocab`, built once per vocabulary object while any grammar compiled for it
  // holds the trie (a vocabulary is immutable and shared per model). Thread-safe.
  static std::shared_ptr<const TokenTrie> ForVocab(const std::shared_ptr<const TokenVocab>& vocab);
};

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_TOKEN_TRIE_H_
