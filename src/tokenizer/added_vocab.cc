#include "tokenizer/added_vocab.h"

#include <algorithm>

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
  v.by_first_byte_[0].resize(256);
  v.by_first_byte_[1].resize(256);
  if (j.is_null()) return v;
  if (!j.is_array()) return InvalidArgument("added_tokens must be an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() ||
        !e.contains("content") || !e["content"].is_string()) {
      return InvalidArgument(where + " needs an integer \"id\" and a string \"content\"");
    }
    AddedToken t;
    const int64_t id = e["id"].get<int64_t>();
    if (id < 0 || id >= (1 << 24)) return OutOfRange(where + ".id is outside [0, 2^24)");
    t.id = static_cast<int32_t>(id);
    t.content = e["content"].get<std::string>();
    if (t.content.empty()) return InvalidArgument(where + ".content is empty");
    if (!IsValidUtf8(t.content)) return InvalidArgument(where + ".content is not valid UTF-8");
    auto flag = [&](const char* k) {
      return e.contains(k) && e[k].is_boolean() && e[k].get<bool>();
    };
    t.special = flag("special");
    t.lstrip = flag("lstrip");
    t.rstrip = flag("rstrip");
    t.single_word = flag("single_word");
    t.normalized = flag("normalized");
    if (v.by_id_.count(t.id) != 0)
      return InvalidArgument(where + ": id " + std::to_string(id) + " twice");
    v.by_id_[t.id] = v.tokens_.size();
    v.by_content_[t.content] = t.id;
    v.tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    v.by_first_byte_[t.normalized ? 1 : 0][static_cast<unsigned char>(t.content[0])].push_back(i);
  }
  for (auto& table : v.by_first_byte_) {
    for (auto& bucket : table) {
      std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
        return v.tokens_[a].content.size() > v.tokens_[b].content.size();
      });
    }
  }
  return v;
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
  const auto& table = by_first_byte_[normalized ? 1 : 0];
  size_t emitted = 0;  // end of what has been pushed
  size_t pos = 0;      // where the search for the next match resumes
  while (pos < text.size()) {
    const auto& bucket = table[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    for (size_t idx : bucket) {
      const AddedToken& t = tokens_[idx];
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    }
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
