#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace vls::tok {
namespace {

bool IsWordChar(char32_t c) {
  // tokenizers uses char::is_alphanumeric plus '_'; ASCII plus "any non-ASCII letter-ish"
  // would need ICU, so this errs on ASCII, which is what single_word tokens guard in practice.
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsSpace(char32_t c) {
  return c == ' ' || (c >= 0x9 && c <= 0xD) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

char32_t LastChar(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  size_t j = i;
  return NextCodePoint(s, &j);
}

}  // namespace

StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const nlohmann::json& j) {
  AddedVocabulary v;
  if (j.is_null()) return v;
  if (!j.is_array())
    return InvalidArgument("added_tokens must be an array, not " + JsonTypeName(j));
  if (j.size() > kMaxAddedTokens) {
    return InvalidArgument("added_tokens has " + std::to_string(j.size()) +
                           " entries, over the bound " + std::to_string(kMaxAddedTokens) +
                           " (kMaxAddedTokens)");
  }
  v.tokens_.reserve(j.size());
  size_t total_bytes = 0;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const nlohmann::json* id_json = e.is_object() ? Field(e, "id") : nullptr;
    const nlohmann::json* content = e.is_object() ? Field(e, "content") : nullptr;
    if (id_json == nullptr || content == nullptr) {
      return InvalidArgument(where + " needs an integer \"id\" and a string \"content\"");
    }
    AddedToken t;
    int64_t id = 0;
    VLS_RETURN_IF_ERROR(ReadJsonInt(*id_json, where + ".id", 0, kMaxTokenId - 1, &id));
    t.id = static_cast<int32_t>(id);
    VLS_RETURN_IF_ERROR(ReadJsonString(*content, where + ".content", &t.content));
    if (t.content.empty()) return InvalidArgument(where + ".content is empty");
    if (t.content.size() > kMaxAddedTokenBytes) {
      return InvalidArgument(where + ".content has " + std::to_string(t.content.size()) +
                             " bytes, over the bound " + std::to_string(kMaxAddedTokenBytes) +
                             " (kMaxAddedTokenBytes)");
    }
    if (!IsValidUtf8(t.content)) return InvalidArgument(where + ".content is not valid UTF-8");
    total_bytes += t.content.size();
    if (total_bytes > kMaxAddedTokenBytesTotal) {
      return InvalidArgument(where + ": the added tokens' contents pass " +
                             std::to_string(kMaxAddedTokenBytesTotal) +
                             " bytes together (kMaxAddedTokenBytesTotal)");
    }
    VLS_RETURN_IF_ERROR(OptionalBool(e, where, "special", &t.special));
    VLS_RETURN_IF_ERROR(OptionalBool(e, where, "lstrip", &t.lstrip));
    VLS_RETURN_IF_ERROR(OptionalBool(e, where, "rstrip", &t.rstrip));
    VLS_RETURN_IF_ERROR(OptionalBool(e, where, "single_word", &t.single_word));
    VLS_RETURN_IF_ERROR(OptionalBool(e, where, "normalized", &t.normalized));
    if (v.by_id_.count(t.id) != 0)
      return InvalidArgument(where + ": id " + std::to_string(id) + " twice");
    if (!v.by_content_.emplace(t.content, t.id).second) {
      return InvalidArgument(where + ": content " + JsonSnippet(*content) +
                             " is already added token " + std::to_string(v.by_content_[t.content]));
    }
    v.by_id_[t.id] = v.tokens_.size();
    v.tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    Trie& trie = v.tries_[t.normalized ? 1 : 0];
    int32_t node = 0;
    for (char c : t.content) {
      const uint64_t key = static_cast<uint64_t>(node) * 256 + static_cast<unsigned char>(c);
      auto [it, added] = trie.edges.emplace(key, static_cast<int32_t>(trie.terminal.size()));
      if (added) trie.terminal.push_back(-1);
      node = it->second;
    }
    trie.terminal[node] = static_cast<int32_t>(i);  // contents are distinct
  }
  return v;
}

const AddedToken* AddedVocabulary::LongestAt(const Trie& trie, std::string_view text,
                                             size_t pos) const {
  const AddedToken* best = nullptr;
  int32_t node = 0;
  for (size_t k = pos; k < text.size(); ++k) {
    auto it =
        trie.edges.find(static_cast<uint64_t>(node) * 256 + static_cast<unsigned char>(text[k]));
    if (it == trie.edges.end()) break;
    node = it->second;
    if (trie.terminal[node] >= 0) best = &tokens_[trie.terminal[node]];
  }
  return best;
}

const AddedToken* AddedVocabulary::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::IdOf(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? -1 : it->second;
}

void AddedVocabulary::Split(std::string_view text, bool normalized,
                            std::vector<Segment>* out) const {
  const Trie& trie = tries_[normalized ? 1 : 0];
  if (trie.terminal.size() == 1) {  // no tokens
    if (!text.empty()) out->push_back({text, -1});
    return;
  }
  size_t emitted = 0;  // end of what has been pushed
  size_t pos = 0;      // where the search for the next match resumes
  while (pos < text.size()) {
    // Leftmost, then longest (contents are distinct, so the longest is unique).
    const AddedToken* hit = LongestAt(trie, text, pos);
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + hit->content.size();
    pos = stop;
    if (hit->single_word) {
      const bool start_ok = start == 0 || !IsWordChar(LastChar(text.substr(0, start)));
      size_t k = stop;
      const bool stop_ok = stop == text.size() || !IsWordChar(NextCodePoint(text, &k));
      if (!start_ok || !stop_ok) {
        pos = start + 1;
        continue;
      }
    }
    if (hit->lstrip) {
      while (start > emitted && IsSpace(LastChar(text.substr(0, start)))) {
        --start;
        while (start > emitted && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      }
    }
    if (hit->rstrip) {
      size_t k = stop;
      while (k < text.size()) {
        size_t next = k;
        if (!IsSpace(NextCodePoint(text, &next))) break;
        k = next;
      }
      stop = k;
      pos = stop;
    }
    if (start > emitted) out->push_back({text.substr(emitted, start - emitted), -1});
    out->push_back({text.substr(start, stop - start), hit->id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace vls::tok
