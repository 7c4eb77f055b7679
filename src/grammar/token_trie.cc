#include "grammar/token_trie.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

namespace vls::grammar {

std::shared_ptr<const TokenTrie> TokenTrie::Build(const TokenVocab& vocab) {
  auto trie = std::make_shared<TokenTrie>();
  std::vector<std::pair<std::string_view, int32_t>> items;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& b = vocab.bytes[static_cast<size_t>(id)];
    const bool usable =
        static_cast<size_t>(id) < vocab.usable.size() && vocab.usable[static_cast<size_t>(id)] != 0;
    if (usable && !b.empty() && b.size() <= 65535) items.emplace_back(b, id);
  }
  std::sort(items.begin(), items.end(), [](const auto& x, const auto& y) {
    const int c = x.first.compare(y.first);
    return c < 0 || (c == 0 && x.second < y.second);
  });
  std::vector<int32_t> ids;
  ids.reserve(items.size());
  for (const auto& item : items) ids.push_back(item.second);
  trie->trie_order.assign(static_cast<size_t>(vocab.size()), -1);
  std::vector<int32_t> path;  // node indices of the current prefix
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string_view cur = vocab.bytes[static_cast<size_t>(id)];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < cur.size() && prev[lcp] == cur[lcp]) ++lcp;
    while (path.size() > lcp) {
      trie->nodes[static_cast<size_t>(path.back())].subtree_end =
          static_cast<int32_t>(trie->nodes.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < cur.size(); ++d) {
      Node n;
      n.depth = static_cast<uint16_t>(d + 1);
      n.byte = static_cast<uint8_t>(cur[d]);
      n.tok_begin = n.tok_end = static_cast<int32_t>(trie->token_ids.size());
      path.push_back(static_cast<int32_t>(trie->nodes.size()));
      trie->nodes.push_back(n);
    }
    Node& leaf = trie->nodes[static_cast<size_t>(path.back())];
    trie->trie_order[static_cast<size_t>(id)] = static_cast<int32_t>(trie->token_ids.size());
    trie->token_ids.push_back(id);
    leaf.tok_end = static_cast<int32_t>(trie->token_ids.size());
    trie->max_depth = std::max(trie->max_depth, static_cast<int>(cur.size()));
    prev = cur;
  }
  for (int32_t n : path) {
    trie->nodes[static_cast<size_t>(n)].subtree_end = static_cast<int32_t>(trie->nodes.size());
  }
  trie->blob_offset.reserve(trie->token_ids.size() + 1);
  for (int32_t id : trie->token_ids) {
    trie->blob_offset.push_back(static_cast<uint32_t>(trie->blob.size()));
    trie->blob += vocab.bytes[static_cast<size_t>(id)];
  }
  trie->blob_offset.push_back(static_cast<uint32_t>(trie->blob.size()));
  return trie;
}

std::shared_ptr<const TokenTrie> TokenTrie::ForVocab(
    const std::shared_ptr<const TokenVocab>& vocab) {
  // Keyed by the vocabulary's address; the weak pointer to the vocabulary tells a live entry
  // from one whose vocabulary is gone (and whose address may have been reused).
  struct Slot {
    std::weak_ptr<const TokenVocab> vocab;
    std::weak_ptr<const TokenTrie> trie;
  };
  static std::mutex mu;
  static std::map<const TokenVocab*, Slot> slots;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = slots.begin(); it != slots.end();) {
    it = it->second.vocab.expired() || it->second.trie.expired() ? slots.erase(it) : std::next(it);
  }
  auto it = slots.find(vocab.get());
  if (it != slots.end()) {
    if (auto trie = it->second.trie.lock()) return trie;
  }
  std::shared_ptr<const TokenTrie> trie = Build(*vocab);
  slots[vocab.get()] = Slot{vocab, trie};
  return trie;
}

}  // namespace vls::grammar
