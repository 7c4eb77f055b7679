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
  static StatusOr<AddedVocabulary> FromJson(const nlohmann::json& added_tokens);

  // Splits `text` on tokens whose `normalized` flag equals `normalized`.
  void Split(std::string_view text, bool normalized, std::vector<Segment>* out) const;
  bool has_normalized_tokens() const { return !by_first_byte_[1].empty(); }

  const AddedToken* Find(int32_t id) const;
  int32_t IdOf(std::string_view content) const;  // -1 if absent
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  // [normalized][first byte] -> indices into tokens_, longest content first.
  std::vector<std::vector<size_t>> by_first_byte_[2];
};

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_ADDED_VOCAB_H_
