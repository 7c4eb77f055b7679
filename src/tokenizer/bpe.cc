#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/byte_level.h"

namespace vls::tok {
namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

bool EmptyOrNull(const nlohmann::json& m, const char* key) {
  if (!m.contains(key) || m[key].is_null()) return true;
  return m[key].is_string() && m[key].get<std::string>().empty();
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& m) {
  if (!m.is_object()) return InvalidArgument("model must be an object");
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") return Unimplemented("model type \"" + type + "\" is not supported");
  if (m.contains("dropout") && !m["dropout"].is_null()) {
    return Unimplemented("BPE dropout is not supported");
  }
  if (!EmptyOrNull(m, "continuing_subword_prefix")) {
    return Unimplemented("BPE continuing_subword_prefix is not supported");
  }
  if (!EmptyOrNull(m, "end_of_word_suffix")) {
    return Unimplemented("BPE end_of_word_suffix is not supported");
  }
  if (m.value("byte_fallback", false)) return Unimplemented("BPE byte_fallback is not supported");
  if (!EmptyOrNull(m, "unk_token")) return Unimplemented("BPE unk_token is not supported");
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return InvalidArgument("model.vocab must be an object of token -> id");
  }
  if (!m.contains("merges") || !m["merges"].is_array()) {
    return InvalidArgument("model.merges must be an array");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->ignore_merges_ = m.value("ignore_merges", false);
  constexpr int64_t kMaxId = 1 << 24;
  for (const auto& [token, id_json] : m["vocab"].items()) {
    if (!id_json.is_number_integer()) {
      return InvalidArgument("model.vocab[\"" + token + "\"] is not an integer id");
    }
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= kMaxId) {
      return OutOfRange("model.vocab[\"" + token + "\"] = " + std::to_string(id) +
                        " is outside [0, 2^24)");
    }
    if (static_cast<size_t>(id) >= bpe->id_to_token_.size()) {
      bpe->id_to_token_.resize(id + 1);
      bpe->has_id_.resize(id + 1, false);
    }
    if (bpe->has_id_[id])
      return InvalidArgument("model.vocab: id " + std::to_string(id) + " twice");
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
  const auto& merges = m["merges"];
  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& e = merges[rank];
    std::string a;
    std::string b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgument("model.merges[" + std::to_string(rank) + "] = \"" + s +
                               "\" is not two tokens separated by one space");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return InvalidArgument("model.merges[" + std::to_string(rank) +
                             "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = bpe->vocab_.find(a);
    auto ib = bpe->vocab_.find(b);
    auto inew = bpe->vocab_.find(a + b);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end() || inew == bpe->vocab_.end()) {
      std::string msg = "model.merges[" + std::to_string(rank) + "] (\"";
      msg += a;
      msg += "\", \"";
      msg += b;
      msg += "\") uses a token that is not in the vocabulary";
      return InvalidArgument(std::move(msg));
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
