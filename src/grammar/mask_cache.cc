#include "grammar/mask_cache.h"

#include <algorithm>

namespace vls::grammar {
namespace {

void SetBit(std::span<uint32_t> mask, int32_t id) {
  mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}

}  // namespace

void MaskCache::FillMask(std::span<const StackTop> tops, std::vector<Frame>* arena,
                         MaskScratch* scratch, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  if (tops.empty()) return;
  if (scratch->engine == nullptr) scratch->engine = std::make_unique<StackEngine>(g_);
  StackEngine& engine = *scratch->engine;
  const size_t arena_base = arena->size();
  std::vector<StackSet>& depth = scratch->depth;
  if (depth.size() < static_cast<size_t>(trie_->max_depth) + 1) {
    depth.resize(static_cast<size_t>(trie_->max_depth) + 1);
  }
  std::vector<size_t> arena_at(depth.size(), arena_base);
  depth[0].Clear();
  depth[0].tops.assign(tops.begin(), tops.end());
  const auto& nodes = trie_->nodes;
  size_t i = 0;
  while (i < nodes.size()) {
    const TokenTrie::Node& n = nodes[i];
    const size_t d = n.depth;
    arena->resize(arena_at[d - 1]);
    engine.Advance(depth[d - 1].tops, n.byte, arena, &depth[d]);
    arena_at[d] = arena->size();
    if (!depth[d].Alive()) {
      i = static_cast<size_t>(n.subtree_end);
      continue;
    }
    for (int32_t t = n.tok_begin; t < n.tok_end; ++t) {
      SetBit(mask, trie_->token_ids[static_cast<size_t>(t)]);
    }
    i = depth[d].tops.empty() ? static_cast<size_t>(n.subtree_end) : i + 1;
  }
  arena->resize(arena_base);
}

}  // namespace vls::grammar
