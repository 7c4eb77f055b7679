#include "runtime/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/utf8.h"

namespace vls {
namespace {

// Feeds `deltas` and returns everything emitted (Finish included), the stop index or -1.
std::pair<std::string, int> Stream(const std::vector<std::string>& stop,
                                   const std::vector<std::string>& deltas) {
  StopMatcher m(stop);
  std::string out;
  for (const std::string& d : deltas) {
    StopMatcher::Result r = m.Feed(d);
    out += r.text;
    if (r.stopped) return {out, r.stop_index};
  }
  out += m.Finish();
  return {out, -1};
}

TEST(StopMatcherTest, WithoutStopStringsEverythingPassesAtOnce) {
  StopMatcher m({});
  StopMatcher::Result r = m.Feed("hello");
  EXPECT_EQ(r.text, "hello");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopMatcherTest, CutsExactlyWhereAStopStringSpanningThreeDeltasBegins) {
  StopMatcher m({"<END>"});
  StopMatcher::Result r = m.Feed("hello <E");
  EXPECT_EQ(r.text, "hello ");  // "<E" could begin the stop string: held
  EXPECT_EQ(m.held_bytes(), 2u);
  r = m.Feed("N");
  EXPECT_EQ(r.text, "");
  EXPECT_FALSE(r.stopped);
  r = m.Feed("D> and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.stopped());
  // Nothing after the match, and nothing held is ever released.
  EXPECT_EQ(m.Feed("x").text, "");
  EXPECT_FALSE(m.Feed("x").stopped);
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopMatcherTest, HeldTextIsReleasedWhenItStopsMatching) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.Feed("xab").text, "x");
  EXPECT_EQ(m.Feed("d").text, "abd");
  EXPECT_EQ(m.Feed("ab").text, "");
  EXPECT_EQ(m.Finish(), "ab");  // the end: no stop string can complete any more
  EXPECT_EQ(m.Feed("c").text, "");
}

TEST(StopMatcherTest, CharacterByCharacter) {
  std::vector<std::string> deltas;
  for (char c : std::string("one two <|stop|> three")) deltas.emplace_back(1, c);
  EXPECT_EQ(Stream({"<|stop|>"}, deltas), (std::pair<std::string, int>{"one two ", 0}));
  EXPECT_EQ(Stream({"<|stop|"}, {"a<|sto", "p", "|"}), (std::pair<std::string, int>{"a", 0}));
}

TEST(StopMatcherTest, SelfOverlappingStopString) {
  // "aab" inside "aaab": the automaton falls back to "aa" after the third a.
  EXPECT_EQ(Stream({"aab"}, {"a", "a", "a", "b", "c"}), (std::pair<std::string, int>{"a", 0}));
  EXPECT_EQ(Stream({"abab"}, {"ababa", "bab"}), (std::pair<std::string, int>{"", 0}));
  EXPECT_EQ(Stream({"abab"}, {"xaba", "cabab"}), (std::pair<std::string, int>{"xabac", 0}));
}

TEST(StopMatcherTest, EarliestStartWinsAmongMatchesCompletedTogether) {
  // One delta completes "cd" (starting at 3) and then "abcde" (starting at 1): the earlier
  // start wins.
  EXPECT_EQ(Stream({"cd", "abcde"}, {"xabcdef"}), (std::pair<std::string, int>{"x", 1}));
  // Equal starts: the shorter completes first; the text is the same either way.
  EXPECT_EQ(Stream({"abc", "ab"}, {"zabc"}), (std::pair<std::string, int>{"z", 1}));
  // A match that is complete is not delayed by a longer stop string that began earlier and
  // might still complete: generation stops as soon as any stop string appears.
  EXPECT_EQ(Stream({"abcd", "bc"}, {"a", "b", "c", "d"}), (std::pair<std::string, int>{"a", 1}));
}

TEST(StopMatcherTest, MultibyteStopStringsAndText) {
  // "世界" spans two deltas; "世" is held, never emitted.
  StopMatcher m({"世界"});
  StopMatcher::Result r = m.Feed("你好世");
  EXPECT_EQ(r.text, "你好");
  r = m.Feed("界!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  // A character sharing the stop string's first byte is not held once it differs.
  StopMatcher e({"é"});
  EXPECT_EQ(e.Feed("aê").text, "aê");
  EXPECT_EQ(e.Feed("bé").text, "b");
}

TEST(StopMatcherTest, ValidationNamesTheOffendingString) {
  const std::vector<std::string> empty = {"ok", ""};
  Status s = ValidateStopStrings(empty);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stop[1] is empty"), std::string::npos) << s.message();
  const std::vector<std::string> bad_utf8 = {"\xC3"};
  EXPECT_NE(ValidateStopStrings(bad_utf8).message().find("stop[0]"), std::string::npos);
  const std::vector<std::string> too_long = {std::string(kMaxStopStringBytes + 1, 'x')};
  EXPECT_FALSE(ValidateStopStrings(too_long).ok());
  const std::vector<std::string> too_many(kMaxStopStrings + 1, "x");
  EXPECT_FALSE(ValidateStopStrings(too_many).ok());
  const std::vector<std::string> fine = {"a", "a", "\n\n", "世界"};
  EXPECT_TRUE(ValidateStopStrings(fine).ok());
}

// The reference: the first delta after which the text so far holds a stop string decides;
// the text is cut at the earliest start of any stop string in it.
std::pair<std::string, int> Reference(const std::vector<std::string>& stop,
                                      const std::vector<std::string>& deltas) {
  std::string text;
  for (const std::string& d : deltas) {
    text += d;
    size_t best = std::string::npos;
    int which = -1;
    for (size_t j = 0; j < stop.size(); ++j) {
      const size_t at = text.find(stop[j]);
      if (at != std::string::npos &&
          (at < best || (at == best && stop[j].size() < stop[static_cast<size_t>(which)].size()))) {
        best = at;
        which = static_cast<int>(j);
      }
    }
    if (which >= 0) return {text.substr(0, best), which};
  }
  return {text, -1};
}

// Random texts over small alphabets (many overlaps), random stop strings cut from the text or
// from the alphabet, random delta boundaries on characters: the result equals the reference,
// every piece emitted is valid UTF-8 and is a prefix of the final text at the moment it is
// emitted (held text never leaks).
TEST(StopMatcherTest, RandomStreamsAgreeWithTheReference) {
  std::mt19937 rng(1234);
  const std::vector<std::vector<std::string>> alphabets = {
      {"a", "b", "c"}, {"a", "é", "世", "😀"}, {"<", "|", "e", "n", "d", ">", " "}};
  for (int iter = 0; iter < 3000; ++iter) {
    const auto& alpha = alphabets[static_cast<size_t>(iter) % alphabets.size()];
    auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    std::vector<std::string> chars;
    const size_t n = 1 + pick(40);
    for (size_t i = 0; i < n; ++i) chars.push_back(alpha[pick(alpha.size())]);
    std::vector<std::string> stop;
    const size_t nstop = pick(4);
    for (size_t k = 0; k < nstop; ++k) {
      std::string s;
      const size_t len = 1 + pick(4);
      if (pick(2) == 0) {  // a substring of the text: likely to match
        const size_t at = pick(n);
        for (size_t i = at; i < std::min(n, at + len); ++i) s += chars[i];
      } else {
        for (size_t i = 0; i < len; ++i) s += alpha[pick(alpha.size())];
      }
      stop.push_back(s);
    }
    std::vector<std::string> deltas;
    for (size_t i = 0; i < n;) {
      const size_t take = 1 + pick(5);
      std::string d;
      for (size_t j = i; j < std::min(n, i + take); ++j) d += chars[j];
      deltas.push_back(d);
      i += take;
    }
    const auto want = Reference(stop, deltas);
    StopMatcher m(stop);
    std::string out;
    int got_index = -1;
    for (const std::string& d : deltas) {
      StopMatcher::Result r = m.Feed(d);
      ASSERT_TRUE(tok::IsValidUtf8(r.text));
      out += r.text;
      ASSERT_EQ(want.first.compare(0, out.size(), out), 0)
          << "emitted text that is not in the result: " << out;
      if (r.stopped) {
        got_index = r.stop_index;
        break;
      }
    }
    out += m.Finish();
    ASSERT_EQ(out, want.first) << "iteration " << iter;
    if (want.second >= 0) {
      // Equal-length stop strings at the same start are the same string: compare the text.
      ASSERT_GE(got_index, 0);
      ASSERT_EQ(stop[static_cast<size_t>(got_index)], stop[static_cast<size_t>(want.second)]);
    } else {
      ASSERT_EQ(got_index, -1);
    }
  }
}

}  // namespace
}  // namespace vls
