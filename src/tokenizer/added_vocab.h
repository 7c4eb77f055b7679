// Added and special tokens: matched in the text before normalisation and BPE, as
// tokenizers' AddedVocabulary does (leftmost, then longest; lstrip/rstrip/single_word flags).
#ifndef VLSTACK_TOKENIZER_ADDED_VOCAB_H_
#define VLSTACK_TOKENIZER_ADDED_VOCAB_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace vls::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of text: either a matched added token (id >= 0) or text for the model (id == -1).
struct Segment {
  std::string_view text;
  int32_t id = -1;
};

// Thread safety: immutable after FromJson.
class AddedVocabulary {  // NOLINT(bugprone-reserved-identifier): clang-tidy 14 flags the implicit
                         // array copy
 public:
  // At most kMaxAddedTokens tokens with distinct ids in [0, kMaxTokenId) and distinct contents
  // of 1 to kMaxAddedTokenBytes bytes of valid UTF-8 (kMaxAddedTokenBytesTotal together); flags
  // must be booleans.
  static StatusOr<AddedVocabulary> FromJson(const nlohmann::json& added_tokens);

  // Splits `text` on tokens whose `normalized` flag equals `normalized`. Cost: at most
  // kMaxAddedTokenBytes steps of a byte trie per byte of text, whatever the tokens.
  void Split(std::string_view text, bool normalized, std::vector<Segment>* out) const;
  bool has_normalized_tokens() const { return tries_[1].terminal.size() > 1; }

  const AddedToken* Find(int32_t id) const;
  int32_t IdOf(std::string_view content) const;  // -1 if absent
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  // A byte trie of the contents per `normalized` flag: node 0 is the root; an edge is keyed
  // node * 256 + byte; terminal_[node] is the index into tokens_ of the content ending there,
  // or -1.
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;
    std::vector<int32_t> terminal{-1};
  };
  // The longest token of `trie` that starts at text[pos], or nullptr.
  const AddedToken* LongestAt(const Trie& trie, std::string_view text, size_t pos) const;
  Trie tries_[2];
};

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_ADDED_VOCAB_H_
