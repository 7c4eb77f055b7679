// GrammarMatcher on hand-made grammars and vocabularies: tokens ending inside characters,
// refusals, CanEnd / MustEnd, the stack bound (matcher_test.cc has the randomised checks).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar/byte_stacks.h"
#include "grammar/matcher.h"

namespace vls::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> MustCompile(const Grammar& g,
                                                   std::shared_ptr<const TokenVocab> v) {
  auto c = CompiledGrammar::Compile(g, std::move(v), GrammarLimits{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : nullptr;
}

TEST(GrammarMatcherTest, TokensEndingInsideACharacter) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  b.SetAlternatives(root, {b.Literal("中文")});
  auto vocab = std::make_shared<TokenVocab>();
  const std::string zh = "中文";  // E4 B8 AD E6 96 87
  vocab->bytes = {zh.substr(0, 1), zh.substr(1, 2), zh.substr(3), zh,
                  zh.substr(0, 2), zh.substr(2, 2), "x"};
  vocab->usable.assign(vocab->bytes.size(), 1);
  auto compiled = MustCompile(std::move(b).Build(root), vocab);
  ASSERT_NE(compiled, nullptr);
  GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(1);
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], (1u << 0) | (1u << 3) | (1u << 4));
  ASSERT_TRUE(m.AcceptToken(4));  // E4 B8
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 1u << 5);  // AD E6
  EXPECT_FALSE(m.CanEnd());
  ASSERT_TRUE(m.AcceptToken(5));
  ASSERT_FALSE(m.AcceptToken(2));  // E6 96 87: E6 was accepted already
  m.Rollback(2);
  ASSERT_TRUE(m.AcceptToken(0));
  ASSERT_TRUE(m.AcceptToken(1));
  ASSERT_TRUE(m.AcceptToken(2));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.MustEnd());
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 0u);
}

// A refused token changes nothing; a token longer than 65535 bytes is never allowed (the trie
// leaves it out) though AcceptBytes takes the same bytes.
TEST(GrammarMatcherTest, RefusalsLeaveTheStateAlone) {
  GrammarBuilder b;
  const int32_t root = b.Repeat("a", {b.Char('a')}, 0, -1);
  auto vocab = std::make_shared<TokenVocab>();
  vocab->bytes = {"a", "b", std::string(70000, 'a'), "aa"};
  vocab->usable = {1, 1, 1, 0};
  auto compiled = MustCompile(std::move(b).Build(root), vocab);
  ASSERT_NE(compiled, nullptr);
  GrammarMatcher m(compiled);
  ASSERT_TRUE(m.AcceptToken(0));
  std::vector<uint32_t> before(1);
  m.FillNextTokenMask(before);
  EXPECT_EQ(before[0], 1u);  // "a" only: "b" cannot follow, the long and the unusable are left out
  EXPECT_FALSE(m.AcceptToken(1));
  EXPECT_FALSE(m.AcceptToken(2));
  EXPECT_FALSE(m.AcceptToken(3));
  EXPECT_FALSE(m.AcceptToken(-1));
  EXPECT_FALSE(m.AcceptToken(4));
  EXPECT_FALSE(m.AcceptBytes("ab"));
  EXPECT_EQ(m.steps(), 1);
  std::vector<uint32_t> after(1);
  m.FillNextTokenMask(after);
  EXPECT_EQ(after, before);
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.AcceptBytes(vocab->bytes[2]));
  EXPECT_EQ(m.steps(), 2);
  m.Rollback(2);
  EXPECT_EQ(m.steps(), 0);
  m.FillNextTokenMask(after);
  EXPECT_EQ(after, before);
}

// A large enum is lowered to a trie of its members (left factoring), so two enums of 9000
// members each do not count as 18000 stacks against the bound (kMaxStacks).
TEST(GrammarMatcherTest, LargeEnumsStayUnderTheBound) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t low = b.AddRule("low");
  const int32_t high = b.AddRule("high");
  for (int32_t half : {low, high}) {
    std::vector<Sequence> members;
    for (int i = 0; i < 9000; ++i) {
      const int n = i * 7919 % 100000 + (half == high ? 100000 : 0);
      members.push_back(b.Literal("\"w" + std::to_string(n) + "\""));
    }
    b.SetAlternatives(half, std::move(members));
  }
  b.SetAlternatives(root, {{b.Ref(low)}, {b.Ref(high)}});
  static_assert(2 * 9000 > kMaxStacks);
  auto vocab = std::make_shared<TokenVocab>();
  vocab->bytes = {"\"", "w", "7", "9", "\"w7919\""};
  vocab->usable.assign(vocab->bytes.size(), 1);
  auto compiled = MustCompile(std::move(b).Build(root), vocab);
  ASSERT_NE(compiled, nullptr);
  GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(1);
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], (1u << 0) | (1u << 4));
  ASSERT_TRUE(m.AcceptToken(0));
  ASSERT_TRUE(m.AcceptToken(1));
  ASSERT_TRUE(m.AcceptBytes("7919"));
  ASSERT_TRUE(m.AcceptToken(0));
  EXPECT_TRUE(m.MustEnd());
}

TEST(GrammarMatcherTest, CanEndAndMustEnd) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t digits = b.Repeat("d", {b.Chars(CharClass{{{'0', '9'}}})}, 1, 3);
  b.SetAlternatives(root, {{b.Ref(digits)}});
  auto vocab = std::make_shared<TokenVocab>();
  vocab->bytes = {"1", "23", "456"};
  vocab->usable.assign(3, 1);
  auto compiled = MustCompile(std::move(b).Build(root), vocab);
  ASSERT_NE(compiled, nullptr);
  GrammarMatcher m(compiled);
  EXPECT_FALSE(m.CanEnd());
  ASSERT_TRUE(m.AcceptToken(0));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.MustEnd());
  EXPECT_FALSE(m.AcceptToken(2));
  ASSERT_TRUE(m.AcceptToken(1));
  EXPECT_TRUE(m.MustEnd());
  EXPECT_FALSE(m.AcceptToken(0));
  EXPECT_EQ(m.steps(), 2);
}

// x ::= "a" x "b" | y, y ::= "a" x "b" | "" doubles its stacks with each "a" (the same
// alternative twice would be merged by the lowering): the bound refuses the byte and leaves the
// state as it was.
TEST(GrammarMatcherTest, AmbiguityIsBounded) {
  GrammarBuilder b;
  const int32_t x = b.AddRule("x");
  const int32_t y = b.AddRule("y");
  b.SetAlternatives(x, {{b.Char('a'), b.Ref(x), b.Char('b')}, {b.Ref(y)}});
  b.SetAlternatives(y, {{b.Char('a'), b.Ref(x), b.Char('b')}, {}});
  auto vocab = std::make_shared<TokenVocab>();
  vocab->bytes = {"a", "b"};
  vocab->usable.assign(2, 1);
  auto compiled = MustCompile(std::move(b).Build(x), vocab);
  ASSERT_NE(compiled, nullptr);
  GrammarMatcher m(compiled);
  int accepted = 0;
  while (accepted < 64 && m.AcceptToken(0)) ++accepted;
  EXPECT_GE(accepted, 8);
  EXPECT_LT(accepted, 64);
  // Still usable: the "b"s close what was accepted.
  for (int i = 0; i < accepted; ++i) ASSERT_TRUE(m.AcceptToken(1)) << i;
  EXPECT_TRUE(m.CanEnd());
}

}  // namespace
}  // namespace vls::grammar
