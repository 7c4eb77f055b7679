// The byte-level BPE model: vocabulary, ranked merges, and the merge loop of Hugging Face
// tokenizers (lowest rank first, leftmost among equals).
#ifndef VLSTACK_TOKENIZER_BPE_H_
#define VLSTACK_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace vls::tok {

// Thread safety: immutable after FromJson except for an internal mutex-guarded word cache;
// EncodeWord may be called from any thread.
class BpeModel {
 public:
  // Parses tokenizer.json's "model" (type "BPE"); merges may be ["a","b"] pairs or "a b"
  // strings. Options it cannot honour (dropout, subword prefixes, byte fallback) are refused.
  // Linear in the document; ids, token lengths and counts within tokenizer_limits.h.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized piece of raw bytes.
  void EncodeWord(std::string_view bytes, std::vector<int32_t>* out) const;

  // Byte-level token text for an id, or nullptr if the id is not in the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  int32_t TokenToId(std::string_view token) const;  // -1 if absent
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  void MergeWord(std::string_view bytes, std::vector<int32_t>* out) const;

  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single byte, -1 if absent
  bool ignore_merges_ = false;

  static constexpr size_t kMaxCachedWordBytes = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_BPE_H_
