#include "grammar/utf8_lowering.h"

#include <gtest/gtest.h>

#include <random>

namespace vls::grammar {
namespace {

bool Matches(const ByteSequence& s, const uint8_t* b, int n) {
  if (static_cast<int>(s.size()) != n) return false;
  for (int k = 0; k < n; ++k) {
    if (!s[static_cast<size_t>(k)].Has(b[k])) return false;
  }
  return true;
}

uint64_t Count(const ByteSet& s) {
  uint64_t n = 0;
  for (uint64_t w : s.words) n += static_cast<uint64_t>(__builtin_popcountll(w));
  return n;
}

// Every member's encoding matches exactly one sequence, no non-member's does, and the sequences
// match no more byte strings than there are members (so nothing but those encodings).
void CheckClass(const CharClass& c) {
  const std::vector<ByteSequence> seqs = Utf8Sequences(c);
  uint64_t members = 0;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    uint8_t b[4];
    const int n = EncodeUtf8(cp, b);
    int hits = 0;
    for (const ByteSequence& s : seqs) hits += Matches(s, b, n) ? 1 : 0;
    const bool member = Contains(c, cp);
    members += member ? 1 : 0;
    ASSERT_EQ(hits, member ? 1 : 0) << "code point " << cp;
  }
  uint64_t strings = 0;
  for (const ByteSequence& s : seqs) {
    uint64_t p = 1;
    for (const ByteSet& b : s) p *= Count(b);
    strings += p;
  }
  EXPECT_EQ(strings, members);
}

TEST(Utf8LoweringTest, EncodesLikeTheStandard) {
  uint8_t b[4];
  EXPECT_EQ(EncodeUtf8(0x41, b), 1);
  EXPECT_EQ(b[0], 0x41);
  ASSERT_EQ(EncodeUtf8(0xE9, b), 2);
  EXPECT_EQ(b[0], 0xC3);
  EXPECT_EQ(b[1], 0xA9);
  ASSERT_EQ(EncodeUtf8(0x4E2D, b), 3);
  EXPECT_EQ(b[0], 0xE4);
  EXPECT_EQ(b[1], 0xB8);
  EXPECT_EQ(b[2], 0xAD);
  ASSERT_EQ(EncodeUtf8(0x1F600, b), 4);
  EXPECT_EQ(b[0], 0xF0);
  EXPECT_EQ(b[3], 0x80);
}

TEST(Utf8LoweringTest, FixedClasses) {
  CheckClass(CharClass{{{'a', 'a'}}});
  CheckClass(CharClass{{{0, 0x10FFFF}}});
  CharClass not_quote = Complement(CharClass{{{'"', '"'}, {'\\', '\\'}}});
  CheckClass(not_quote);
  CheckClass(CharClass{{{0x7F, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000}}});
  CheckClass(CharClass{});
  // A class of everything but a few characters needs few sequences.
  EXPECT_LE(Utf8Sequences(not_quote).size(), 10u);
}

TEST(Utf8LoweringTest, RandomClassesAgainstBruteForce) {
  std::mt19937 rng(7);
  const uint32_t edges[] = {0,      0x7F,   0x80,   0x7FF,   0x800,   0xFFF,   0x1000,
                            0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0x10FFFF};
  for (int iter = 0; iter < 12; ++iter) {
    CharClass c;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) {
      auto pick = [&]() -> uint32_t {
        const uint32_t e = edges[rng() % std::size(edges)];
        const int32_t delta = static_cast<int32_t>(rng() % 200) - 100;
        return static_cast<uint32_t>(
            std::clamp<int64_t>(static_cast<int64_t>(e) + delta, 0, 0x10FFFF));
      };
      uint32_t lo = pick();
      uint32_t hi = pick();
      if (lo > hi) std::swap(lo, hi);
      c.ranges.push_back({lo, hi});
    }
    Normalize(&c);
    SCOPED_TRACE(iter);
    CheckClass(c);
  }
}

}  // namespace
}  // namespace vls::grammar
