// The matcher's pushdown stacks over a ByteGrammar's positions (grammar/matcher.h). Private to
// the grammar layer.
//
// A stack is its top position plus a parent: a node of an append-only arena of return frames
// (position to resume at, parent frame), kBottom for the bottom of a full stack or kContext for
// "unknown from here on" when a position is matched without its context (the mask cache).
// Tops always stand on a byte set: rule references are expanded, ends of alternatives popped.
// A call whose return position is the end of its alternative pushes no frame (tail call), so
// right recursion (x* as R ::= x R | ε) keeps stacks flat.
#ifndef VLSTACK_GRAMMAR_BYTE_STACKS_H_
#define VLSTACK_GRAMMAR_BYTE_STACKS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/byte_grammar.h"

namespace vls::grammar {

struct StackTop {
  int32_t pos = 0;
  int32_t parent = 0;
  bool operator==(const StackTop&) const = default;
};
using Frame = StackTop;  // an arena node: the position to resume at and its parent

inline constexpr int32_t kBottom = -1;
inline constexpr int32_t kContext = -2;

// The most stacks one state may hold and the most closure steps one byte may take; past either
// the byte is refused (overflow), so an ambiguous grammar cannot blow up.
inline constexpr size_t kMaxStacks = 16384;
inline constexpr size_t kMaxClosureWork = size_t{1} << 18;

struct StackSet {
  std::vector<StackTop> tops;
  bool can_end = false;      // some stack popped past its bottom: the sentence may end here
  bool hit_context = false;  // some stack popped into kContext
  bool overflow = false;     // a bound above was passed; the set is not usable

  // Bytes may follow or the text may end here.
  bool Alive() const { return !overflow && (!tops.empty() || can_end); }
  void Clear() {
    tops.clear();
    can_end = hit_context = overflow = false;
  }
};

// Advances stack sets byte by byte. Holds scratch only; one per thread.
class StackEngine {
 public:
  explicit StackEngine(const ByteGrammar* g) : g_(g) {}

  // The stacks at the start of rule `rule` over `parent` (kBottom for the root).
  void Start(int32_t rule, int32_t parent, std::vector<Frame>* arena, StackSet* out);
  // The stacks of `in` that take byte b, advanced and expanded into `out` (cleared first).
  void Advance(std::span<const StackTop> in, uint8_t b, std::vector<Frame>* arena, StackSet* out);
  // With a map set, frames are hash-consed through it (key (pos << 32) | parent -> frame id),
  // so equal stacks get equal ids; nullptr (the default) appends every frame.
  void SetInterner(std::unordered_map<uint64_t, int32_t>* interner) { interner_ = interner; }

 private:
  void Closure(std::vector<Frame>* arena, StackSet* out);
  bool Visit(int32_t pos, int32_t parent);
  void NewCall();

  const ByteGrammar* g_;
  std::unordered_map<uint64_t, int32_t>* interner_ = nullptr;
  std::vector<StackTop> work_;
  // The (pos, parent) keys visited in this call: a short array scanned linearly, then (past
  // kSmall keys) an open-addressing set cleared by bumping the stamp.
  static constexpr size_t kSmall = 24;
  uint64_t small_[kSmall] = {};
  size_t small_n_ = 0;
  bool hashed_ = false;
  bool HashInsert(uint64_t k);
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 0;
  size_t used_ = 0;
};

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_BYTE_STACKS_H_
