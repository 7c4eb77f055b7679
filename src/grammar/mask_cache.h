// Token masks for a set of stacks, with an adaptive per-position cache (grammar/matcher.h).
// Private to the grammar layer.
//
// For a stack top at position p the cache holds an entry computed from p alone, its context
// below replaced by kContext: each usable token is accepted (some path consumes all its bytes
// within what p's rule and its callees can do), rejected (no path gets through its bytes without
// leaving the rule) or uncertain (a path leaves the rule, so the stack below decides). When an
// entry leaves more than kUncertainLimit tokens uncertain, a child entry keyed by the next
// frame's position (or the bottom of the stack) re-examines just those with one more frame of
// context, and so on down; what a child accepts is stored as a delta. The tokens still uncertain
// at the deepest entry used are checked against the real stack. Entries are computed lazily,
// once, by whichever thread needs them first, and then never change.
#ifndef VLSTACK_GRAMMAR_MASK_CACHE_H_
#define VLSTACK_GRAMMAR_MASK_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/byte_grammar.h"
#include "grammar/byte_stacks.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace vls::grammar {

// Uncertain tokens an entry may leave before a deeper entry is made, and the deepest context.
inline constexpr size_t kUncertainLimit = 48;
inline constexpr int kMaxContextDepth = 24;
// The most memory one grammar's cache keeps; past it new entries are computed for the call that
// needs them and dropped after it (correct, slower).
inline constexpr size_t kMaxCacheBytes = size_t{256} << 20;
// The most stacks the walks' shared DFA holds (8 bytes each) before the walk filling an entry
// stops and leaves the rest of its tokens uncertain (checked against the real stacks).
inline constexpr size_t kMaxWalkTops = size_t{1} << 22;
// Tests set another limit (0: always go down to the bottom of the stack or kMaxContextDepth)
// and budgets (0: nothing kept) to exercise every path; caches made afterwards use them.
void SetUncertainLimitForTesting(size_t limit);
void SetCacheBudgetForTesting(size_t bytes);
void SetWalkBudgetForTesting(size_t tops);

struct MaskEntry {
  // The tokens this entry accepts (beyond its parents'): ids, or a bitmask when many.
  std::vector<int32_t> accepted_ids;
  std::vector<uint32_t> accepted_bits;  // [MaskWords(V)] or empty
  std::vector<int32_t> uncertain;       // token ranks (TokenTrie::token_ids), increasing

  mutable std::mutex mu;
  mutable std::unordered_map<int32_t, std::unique_ptr<MaskEntry>> children;  // guarded by mu
};

// Per-matcher scratch for mask walks.
struct MaskScratch {
  std::unique_ptr<StackEngine> engine;
  std::vector<StackSet> depth;   // [d] the stacks after d bytes of the current token
  std::vector<uint8_t> context;  // [d] a path left the rule within d bytes
  std::vector<size_t> arena_at;  // [d] the arena's size after depth d
  std::vector<int32_t> states;   // [d] the walk's state after d bytes
  std::vector<int32_t> keys;     // the positions of the context being looked up
  std::vector<std::unique_ptr<MaskEntry>> unstored;  // entries past the cache budget
};

class WalkDfa;

class MaskCache {
 public:
  MaskCache(const ByteGrammar* g, const TokenTrie* trie, const TokenVocab* vocab);
  ~MaskCache();
  MaskCache(const MaskCache&) = delete;
  MaskCache& operator=(const MaskCache&) = delete;

  // Sets in `mask` ([MaskWords(V)], cleared first) exactly the tokens that can follow `tops`.
  // The arena is used for scratch frames and left at its size.
  void FillMask(std::span<const StackTop> tops, std::vector<Frame>* arena, MaskScratch* scratch,
                std::span<uint32_t> mask) const;

 private:
  const MaskEntry* Root(int32_t pos, std::vector<Frame>* arena, MaskScratch* scratch) const;
  const MaskEntry* Child(const MaskEntry* parent, std::vector<Frame>* arena,
                         MaskScratch* scratch) const;
  void Store(std::vector<int32_t> accepted, MaskEntry* e) const;
  // Whether an entry of this size still fits the budget (then counted).
  bool FitsBudget(const MaskEntry& e) const;

  const ByteGrammar* g_;
  const TokenTrie* trie_;
  const TokenVocab* vocab_;
  size_t uncertain_limit_;
  mutable std::mutex dfa_mu_;  // held by the walks that fill entries
  std::unique_ptr<WalkDfa> dfa_;
  size_t budget_;
  mutable std::atomic<size_t> bytes_{0};
  std::unique_ptr<std::atomic<MaskEntry*>[]> roots_;  // [positions]
};

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_MASK_CACHE_H_
