// Character classes (sets of code points) as UTF-8 byte sequences, for the matcher's byte-level
// automaton (grammar/matcher.h). Private to the grammar layer.
#ifndef VLSTACK_GRAMMAR_UTF8_LOWERING_H_
#define VLSTACK_GRAMMAR_UTF8_LOWERING_H_

#include <array>
#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace vls::grammar {

// A set of bytes: bit (b % 64) of word b / 64.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool Has(uint8_t b) const { return ((words[b >> 6] >> (b & 63)) & 1u) != 0; }
  void Add(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool Empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  bool operator<(const ByteSet& o) const { return words < o.words; }
};

// One byte set per byte of a character's encoding (1 to 4).
using ByteSequence = std::vector<ByteSet>;

// The UTF-8 encodings of the members of `c` (normalised) as byte sequences whose languages are
// disjoint and whose union is exactly those encodings. Sequences that differ in one position
// only are merged, so a class usually needs a handful (one per encoded length and lead range).
std::vector<ByteSequence> Utf8Sequences(const CharClass& c);

// The UTF-8 encoding of `cp` (<= 0x10FFFF, not a surrogate) into out; returns its length.
int EncodeUtf8(uint32_t cp, uint8_t out[4]);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_UTF8_LOWERING_H_
