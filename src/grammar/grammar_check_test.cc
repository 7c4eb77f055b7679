// ValidateGrammar and PrintGbnf on grammars built directly with GrammarBuilder (the GBNF round
// trips are in gbnf_test.cc).
#include "grammar/grammar_check.h"

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "gtest/gtest.h"

namespace vls::grammar {
namespace {

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// root ::= "a" root | "b"
Grammar RightRecursive() {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  Sequence loop = b.Literal("a");
  loop.push_back(b.Ref(root));
  b.SetAlternatives(root, {loop, b.Literal("b")});
  return std::move(b).Build(root);
}

TEST(ValidateGrammar, AcceptsRightRecursion) {
  EXPECT_TRUE(ValidateGrammar(RightRecursive(), GrammarLimits{}).ok());
}

TEST(ValidateGrammar, RootMustExist) {
  Grammar g = RightRecursive();
  g.root = 5;
  const Status s = ValidateGrammar(g, GrammarLimits{});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s, "no root rule")) << s.message();
  EXPECT_FALSE(ValidateGrammar(Grammar{}, GrammarLimits{}).ok());
}

TEST(ValidateGrammar, ReferencesMustNameRules) {
  Grammar g = RightRecursive();
  g.rules[0].alternatives[0].push_back(Element{Element::Kind::kRule, 7});
  int32_t fault = -2;
  const Status s = ValidateGrammarAt(g, GrammarLimits{}, &fault);
  EXPECT_TRUE(Mentions(s, "refers to rule 7")) << s.message();
  EXPECT_EQ(fault, 0);
  g = RightRecursive();
  g.rules[0].alternatives[0].push_back(Element{Element::Kind::kChars, -1});
  EXPECT_TRUE(Mentions(ValidateGrammar(g, GrammarLimits{}), "character class -1"));
}

TEST(ValidateGrammar, EveryRuleHasAnAlternative) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t empty = b.AddRule("nothing");
  b.SetAlternatives(root, {{b.Ref(empty)}});
  const Status s = ValidateGrammar(std::move(b).Build(root), GrammarLimits{});
  EXPECT_TRUE(Mentions(s, "'nothing' has no alternatives")) << s.message();
}

TEST(ValidateGrammar, EmptyAlternativeIsFine) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  b.SetAlternatives(root, {Sequence{}});
  EXPECT_TRUE(ValidateGrammar(std::move(b).Build(root), GrammarLimits{}).ok());
}

TEST(ValidateGrammar, DirectLeftRecursion) {
  // root ::= root "a" | "b"
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  Sequence left{b.Ref(root)};
  const Sequence a = b.Literal("a");
  left.insert(left.end(), a.begin(), a.end());
  b.SetAlternatives(root, {left, b.Literal("b")});
  int32_t fault = -1;
  const Status s = ValidateGrammarAt(std::move(b).Build(root), GrammarLimits{}, &fault);
  EXPECT_TRUE(Mentions(s, "left-recursive (root -> root")) << s.message();
  EXPECT_EQ(fault, root);
}

TEST(ValidateGrammar, LeftRecursionThroughNullablePrefix) {
  // root ::= x ; x ::= opt y "a" ; y ::= opt x | "c" ; opt ::= "o" | ""
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t x = b.AddRule("x");
  const int32_t y = b.AddRule("y");
  const int32_t opt = b.AddRule("opt");
  b.SetAlternatives(root, {{b.Ref(x)}});
  Sequence xs{b.Ref(opt), b.Ref(y)};
  xs.push_back(b.Char('a'));
  b.SetAlternatives(x, {xs});
  b.SetAlternatives(y, {{b.Ref(opt), b.Ref(x)}, b.Literal("c")});
  b.SetAlternatives(opt, {b.Literal("o"), Sequence{}});
  const Status s = ValidateGrammar(std::move(b).Build(root), GrammarLimits{});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s, "x -> y -> x")) << s.message();
}

TEST(ValidateGrammar, NonNullablePrefixStopsLeftRecursion) {
  // x ::= opt "k" y "a" | "a" ; y ::= opt x  (the "k" consumes before the recursion)
  GrammarBuilder b;
  const int32_t x = b.AddRule("root");
  const int32_t y = b.AddRule("y");
  const int32_t opt = b.AddRule("opt");
  b.SetAlternatives(x, {{b.Ref(opt), b.Char('k'), b.Ref(y), b.Char('a')}, b.Literal("a")});
  b.SetAlternatives(y, {{b.Ref(opt), b.Ref(x)}});
  b.SetAlternatives(opt, {b.Literal("o"), Sequence{}});
  EXPECT_TRUE(ValidateGrammar(std::move(b).Build(x), GrammarLimits{}).ok());
}

TEST(ValidateGrammar, StarOverNullableIsLeftRecursive) {
  // root ::= e* with e ::= "" — a repetition that can loop without consuming.
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t e = b.AddRule("e");
  b.SetAlternatives(e, {Sequence{}});
  const int32_t rep = b.Repeat("root", {b.Ref(e)}, 0, -1);
  b.SetAlternatives(root, {{b.Ref(rep)}});
  const Status s = ValidateGrammar(std::move(b).Build(root), GrammarLimits{});
  EXPECT_TRUE(Mentions(s, "left-recursive")) << s.message();
}

TEST(ValidateGrammar, RuleThatCanNeverFinish) {
  // root ::= "x" loop ; loop ::= "y" loop — only ever loops.
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t loop = b.AddRule("loop");
  b.SetAlternatives(root, {{b.Char('x'), b.Ref(loop)}});
  b.SetAlternatives(loop, {{b.Char('y'), b.Ref(loop)}});
  int32_t fault = -1;
  const Status s = ValidateGrammarAt(std::move(b).Build(root), GrammarLimits{}, &fault);
  EXPECT_TRUE(Mentions(s, "can never finish")) << s.message();
  EXPECT_EQ(fault, root);  // root cannot finish either; it is found first
}

TEST(ValidateGrammar, Limits) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  b.SetAlternatives(root, {b.Literal("abcdef"), b.Literal("x"), b.Literal("y")});
  const Grammar g = std::move(b).Build(root);
  GrammarLimits limits;
  EXPECT_TRUE(ValidateGrammar(g, limits).ok());
  limits.max_elements = 7;
  EXPECT_TRUE(Mentions(ValidateGrammar(g, limits), "max_elements"));
  limits = GrammarLimits{};
  limits.max_enum = 2;
  EXPECT_TRUE(Mentions(ValidateGrammar(g, limits), "max_enum"));
  limits = GrammarLimits{};
  limits.max_rules = 0;
  EXPECT_TRUE(Mentions(ValidateGrammar(g, limits), "max_rules"));
}

TEST(ValidateGrammar, ClassesMustBeNormal) {
  Grammar g = RightRecursive();
  g.classes.push_back(CharClass{{{5, 9}, {8, 12}}});
  EXPECT_TRUE(Mentions(ValidateGrammar(g, GrammarLimits{}), "not normalised"));
  g.classes.back() = CharClass{{{0xD000, 0xD900}}};
  EXPECT_FALSE(ValidateGrammar(g, GrammarLimits{}).ok());
  g.classes.back() = CharClass{{{0x10, 0x110000}}};
  EXPECT_FALSE(ValidateGrammar(g, GrammarLimits{}).ok());
}

TEST(ValidateGrammar, LongChainIsLinear) {
  // r0 ::= r1 ; r1 ::= r2 ; ... ; rN ::= "" | "z" — nullable through a long chain in the
  // worst order for a fixed-point iteration, then a cycle at the end of it.
  GrammarBuilder b;
  constexpr int kN = 20000;
  std::vector<int32_t> ids;
  ids.reserve(kN);
  for (int i = 0; i < kN; ++i) ids.push_back(b.AddRule("r" + std::to_string(i)));
  for (int i = 0; i + 1 < kN; ++i) b.SetAlternatives(ids[i], {{b.Ref(ids[i + 1])}});
  b.SetAlternatives(ids[kN - 1], {Sequence{}, b.Literal("z")});
  Grammar g = std::move(b).Build(ids[0]);
  EXPECT_TRUE(ValidateGrammar(g, GrammarLimits{}).ok());
  g.rules[kN - 1].alternatives.push_back({Element{Element::Kind::kRule, ids[0]}});
  const Status s = ValidateGrammar(g, GrammarLimits{});
  EXPECT_TRUE(Mentions(s, "left-recursive (r0 -> r1 ->")) << s.message();
  EXPECT_TRUE(Mentions(s, "... -> r0,")) << s.message();
}

TEST(PrintGbnf, LiteralsClassesAndNames) {
  GrammarBuilder b;
  const int32_t top = b.AddRule("top");
  const int32_t odd = b.AddRule("odd name_1");
  const int32_t other_root = b.AddRule("root");
  b.SetAlternatives(top, {{b.Ref(odd), b.Ref(other_root)}});
  Sequence lit = b.Literal("q\"\\\n\t\xC3\xA9");
  lit.push_back(b.Chars(CharClass{{{'a', 'z'}, {'-', '-'}, {']', ']'}, {'^', '^'}}}));
  lit.push_back(b.Chars(Complement(CharClass{{{'\n', '\n'}}})));
  lit.push_back(b.Chars(Complement(CharClass{})));
  lit.push_back(b.Chars(CharClass{}));
  lit.push_back(b.Chars(CharClass{{{0x1F600, 0x1F64F}, {0x80, 0x81}}}));
  b.SetAlternatives(odd, {lit, Sequence{}});
  b.SetAlternatives(other_root, {b.Literal("r")});
  const std::string text = PrintGbnf(std::move(b).Build(top));
  EXPECT_EQ(text,
            "root ::= odd-name-1 root-1\n"
            "odd-name-1 ::= \"q\\\"\\\\\\n\\t\\xE9\" [\\-\\]\\x5Ea-z] [^\\n] . [] "
            "[\\x80\\x81\\U0001F600-\\U0001F64F] | \"\"\n"
            "root-1 ::= \"r\"\n");
}

}  // namespace
}  // namespace vls::grammar
