#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"

namespace vls::tok {
namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Options of the BPE model that we cannot honour: absent, null or "" is fine; another string
// is refused by name; another type is a type error.
Status RefuseNonEmptyString(const nlohmann::json& m, const char* key) {
  std::string v;
  VLS_RETURN_IF_ERROR(OptionalString(m, "model", key, &v));
  if (!v.empty()) return Unimplemented(std::string("BPE ") + key + " is not supported");
  return Status::Ok();
}

// A token's text for an error message: cut and with invalid UTF-8 replaced.
std::string Shown(const std::string& token) { return JsonSnippet(nlohmann::json(token), 40); }

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& m) {
  if (!m.is_object()) return InvalidArgument("model must be an object, not " + JsonTypeName(m));
  std::string type = "BPE";
  VLS_RETURN_IF_ERROR(OptionalString(m, "model", "type", &type));
  if (type != "BPE") {
    return Unimplemented("model type " + JsonSnippet(nlohmann::json(type)) + " is not supported");
  }
  if (Field(m, "dropout") != nullptr) return Unimplemented("BPE dropout is not supported");
  VLS_RETURN_IF_ERROR(RefuseNonEmptyString(m, "continuing_subword_prefix"));
  VLS_RETURN_IF_ERROR(RefuseNonEmptyString(m, "end_of_word_suffix"));
  VLS_RETURN_IF_ERROR(RefuseNonEmptyString(m, "unk_token"));
  bool byte_fallback = false;
  VLS_RETURN_IF_ERROR(OptionalBool(m, "model", "byte_fallback", &byte_fallback));
  if (byte_fallback) return Unimplemented("BPE byte_fallback is not supported");
  const nlohmann::json* vocab = Field(m, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return InvalidArgument("model.vocab must be an object of token -> id");
  }
  const nlohmann::json* merges = Field(m, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return InvalidArgument("model.merges must be an array");
  }
  if (vocab->size() > static_cast<size_t>(kMaxTokenId)) {
    return InvalidArgument("model.vocab has " + std::to_string(vocab->size()) +
                           " tokens, over the bound " + std::to_string(kMaxTokenId) +
                           " (kMaxTokenId)");
  }
  if (merges->size() > kMaxMerges) {
    return InvalidArgument("model.merges has " + std::to_string(merges->size()) +
                           " entries, over the bound " + std::to_string(kMaxMerges) +
                           " (kMaxMerges)");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  VLS_RETURN_IF_ERROR(OptionalBool(m, "model", "ignore_merges", &bpe->ignore_merges_));

  // First pass: every id checked, so the id tables below are sized from checked numbers only.
  int64_t max_id = -1;
  for (const auto& [token, id_json] : vocab->items()) {
    int64_t id = 0;
    VLS_RETURN_IF_ERROR(
        ReadJsonInt(id_json, "model.vocab[" + Shown(token) + "]", 0, kMaxTokenId - 1, &id));
    if (token.size() > kMaxTokenBytes) {
      return InvalidArgument("model.vocab[" + Shown(token) + "] has " +
                             std::to_string(token.size()) + " bytes, over the bound " +
                             std::to_string(kMaxTokenBytes) + " (kMaxTokenBytes)");
    }
    max_id = std::max(max_id, id);
  }
  const int64_t dense_limit = 2 * static_cast<int64_t>(vocab->size()) + kMaxVocabIdSlack;
  if (max_id >= dense_limit) {
    return InvalidArgument("model.vocab: id " + std::to_string(max_id) + " with only " +
                           std::to_string(vocab->size()) +
                           " tokens; ids must be dense (below 2 x tokens + " +
                           std::to_string(kMaxVocabIdSlack) + ", kMaxVocabIdSlack)");
  }
  bpe->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  bpe->has_id_.resize(static_cast<size_t>(max_id + 1), false);
  bpe->vocab_.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    const auto id = id_json.get<int64_t>();  // checked above
    if (bpe->has_id_[id]) {
      return InvalidArgument("model.vocab: id " + std::to_string(id) + " twice");
    }
    bpe->id_to_token_[id] = token;
    bpe->has_id_[id] = true;
    bpe->vocab_.emplace(token, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    ch = BytesToByteLevel(std::string(1, static_cast<char>(b)));
    auto it = bpe->vocab_.find(ch);
    bpe->byte_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
  }
  bpe->merges_.reserve(merges->size());
  std::string a;
  std::string b;
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const auto& e = (*merges)[rank];
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    if (e.is_string()) {
      const auto& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgument(where + " = " + JsonSnippet(e) +
                               " is not two tokens separated by one space");
      }
      a.assign(s, 0, sp);
      b.assign(s, sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>();
      b = e[1].get_ref<const std::string&>();
    } else {
      return InvalidArgument(where + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = bpe->vocab_.find(a);
    auto ib = bpe->vocab_.find(b);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end() ||
        a.size() + b.size() > kMaxTokenBytes) {
      return InvalidArgument(where + " (" + Shown(a) + ", " + Shown(b) +
                             ") uses a token that is not in the vocabulary");
    }
    a += b;  // the merged token
    auto inew = bpe->vocab_.find(a);
    if (inew == bpe->vocab_.end()) {
      return InvalidArgument(where + " (" + Shown(a) +
                             ") makes a token that is not in the vocabulary");
    }
    // A later duplicate of a pair keeps the first (lowest) rank, as tokenizers does.
    bpe->merges_.emplace(PairKey(ia->second, ib->second),
                         Merge{static_cast<int32_t>(rank), inew->second});
  }
  return bpe;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::EncodeWord(std::string_view bytes, std::vector<int32_t>* out) const {
  if (bytes.size() > kMaxCachedWordBytes) {
    MergeWord(bytes, out);
    return;
  }
  const std::string key(bytes);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  MergeWord(bytes, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(key, std::move(ids));
}

void BpeModel::MergeWord(std::string_view bytes, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(BytesToByteLevel(bytes));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(bytes.size());
  for (char c : bytes) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // no unk token: tokenizers drops symbols it cannot name
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    // std::priority_queue pops the largest: invert so that the lowest rank, then the lowest
    // position, comes first.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(sym.size());
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
  auto push_pair = [&](int32_t left) {
    const int32_t right = sym[left].next;
    if (right < 0) return;
    auto it = merges_.find(PairKey(sym[left].id, sym[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int32_t right_pos = left.next;
    // Skip stale entries: the pair at this position changed since it was queued.
    auto it = merges_.find(PairKey(left.id, sym[right_pos].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    sym[right_pos].alive = false;
    left.next = sym[right_pos].next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : sym) {
    if (s.alive) out->push_back(s.id);
  }
}

}  // namespace vls::tok
