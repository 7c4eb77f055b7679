#include "grammar/regex.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "grammar/json_schema_regex.h"
#include "grammar/json_schema_test_util.h"
#include "grammar/matcher.h"

namespace vls::grammar {
namespace {

using testing_util::Accepts;

Grammar Compile(std::string_view pattern) {
  StatusOr<Grammar> g = RegexToGrammar(pattern, GrammarLimits{});
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status().message();
  return g.ok() ? *g : Grammar{};
}

std::string ErrorOf(std::string_view pattern, const GrammarLimits& limits = {}) {
  StatusOr<Grammar> g = RegexToGrammar(pattern, limits);
  EXPECT_FALSE(g.ok()) << pattern;
  return g.ok() ? std::string() : g.status().message();
}

struct Case {
  const char* pattern;
  std::vector<const char*> yes;
  std::vector<const char*> no;
};

TEST(RegexTest, LanguagesOfTheSubset) {
  const Case cases[] = {
      {"abc", {"abc"}, {"", "ab", "abcd", "xbc"}},
      {"^abc$", {"abc"}, {"ab", "abcc"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"a*", {"", "a", "aaaa"}, {"b", "ab"}},
      {"a+b?", {"a", "ab", "aaab"}, {"", "b", "abb"}},
      {"(ab)+", {"ab", "abab"}, {"", "aba"}},
      {"(?:ab|c){2}", {"abab", "abc", "cc", "cab"}, {"ab", "ccc"}},
      {"a{2,3}", {"aa", "aaa"}, {"a", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaa"}, {"a"}},
      {"a{0}b", {"b"}, {"ab"}},
      {"a*?b+?c??", {"b", "aabbc"}, {"c"}},
      {"[a-c]x", {"ax", "cx"}, {"dx", "x"}},
      {"[^a-c]", {"d", "\xc3\xa9", "\n"}, {"a", "c", ""}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a-]", {"-", "a"}, {"b"}},
      {"\\d\\w\\s", {"0a ", "9_\t"}, {"aa ", "0a0"}},
      {"\\D\\W\\S", {"a-x"}, {"0-x", "aax", "a- "}},
      {"[\\d.]+", {"1.5", "..."}, {"a"}},
      {"\\x41\\u00e9\\n\\t", {"A\xc3\xa9\n\t"}, {"A\xc3\xa9 \t"}},
      {"\\u{1F600}", {"\xf0\x9f\x98\x80"}, {"a"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/", {".*+?()[]{}|^$\\/"}, {""}},
      {".", {"a", "\xe2\x82\xac"}, {"\n", "\r", ""}},
      {"[^]", {"\n", "a"}, {""}},
      {"[\\b]", {"\b"}, {"b"}},
      {"a{,3}", {"a{,3}"}, {"a"}},  // not a quantifier: literal (Annex B)
      {"x{", {"x{"}, {"x"}},
      {"(a*)*b", {"b", "aab"}, {"a"}},
      {"(a?b?)+c", {"c", "abac", "bbc"}, {"ab"}},
      {"((a|)*|b)*", {"", "a", "ab", "bba"}, {"c"}},
      {"(?<year>[0-9]{4})-(?P<m>[0-9]{2})", {"2024-01"}, {"2024-1"}},
      {"\xc3\xa9+", {"\xc3\xa9\xc3\xa9"}, {"e"}},
  };
  for (const Case& c : cases) {
    const Grammar g = Compile(c.pattern);
    for (const char* s : c.yes) EXPECT_TRUE(Accepts(g, s)) << c.pattern << " should match " << s;
    for (const char* s : c.no) EXPECT_FALSE(Accepts(g, s)) << c.pattern << " matched " << s;
  }
}

TEST(RegexTest, RefusesByNameWithOffset) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a)\\1", "backreference is not supported at offset 3"},
      {"a(?=b)", "lookahead is not supported at offset 1"},
      {"a(?!b)", "lookahead is not supported at offset 1"},
      {"(?<=a)b", "lookbehind is not supported at offset 0"},
      {"(?<!a)b", "lookbehind is not supported at offset 0"},
      {"(?i)a", "inline flags"},
      {"(?>a)", "atomic group"},
      {"(?P=x)", "named backreference"},
      {"\\k<x>", "named backreference \\k"},
      {"a^b", "anchor ^ in the middle of the pattern is not supported at offset 1"},
      {"a$b", "anchor $ in the middle of the pattern is not supported at offset 1"},
      {"(^a)", "anchor ^ in the middle"},
      {"a++", "possessive quantifier is not supported at offset 2"},
      {"a{2}+", "possessive quantifier"},
      {"a**", "quantifier after a quantifier at offset 2"},
      {"*a", "nothing to repeat at offset 0"},
      {"{2}", "nothing to repeat at offset 0"},
      {"\\bword", "word boundary \\b is not supported at offset 0"},
      {"\\p{L}", "Unicode property escape"},
      {"\\cA", "control escape"},
      {"\\q", "unknown escape \\q at offset 0"},
      {"[]", "empty class [] matches nothing at offset 0"},
      {"[abc", "unterminated class at offset 0"},
      {"(ab", "unterminated group at offset 0"},
      {"ab)", "unmatched ) at offset 2"},
      {"[z-a]", "range out of order at offset 2"},
      {"[\\d-z]", "range with a class escape"},
      {"a{3,2}", "repetition {m,n} with n < m at offset 1"},
      {"\\x4", "expected a hex digit"},
      {"\\uD800", "surrogate"},
      {"a\\", "pattern ends in a backslash"},
      {"\xff", "invalid UTF-8 at offset 0"},
  };
  for (const auto& [pattern, message] : cases) {
    EXPECT_NE(ErrorOf(pattern).find(message), std::string::npos)
        << pattern << " -> " << ErrorOf(pattern);
  }
}

TEST(RegexTest, BoundsCheckedBeforeExpanding) {
  EXPECT_NE(ErrorOf("a{1001}").find("over the limit of 1000"), std::string::npos);
  EXPECT_NE(ErrorOf("a{2,99999999999999}").find("over the limit of 1000"), std::string::npos);
  // Nested counted repetition: each level is a rule, so sizes add, but the elements still count.
  GrammarLimits small;
  small.max_elements = 2500;
  EXPECT_NE(ErrorOf("((a{1000}){1000}){1000}", small).find("grammar elements"), std::string::npos);
  EXPECT_TRUE(RegexToGrammar("((a{1000}){1000}){1000}", GrammarLimits{}).ok());
  small = GrammarLimits{};
  small.max_rules = 100;
  EXPECT_NE(ErrorOf("a{0,500}", small).find("grammar rules"), std::string::npos);
  small = GrammarLimits{};
  small.max_nesting = 3;
  EXPECT_NE(ErrorOf("((((a))))", small).find("groups nest deeper than the limit of 3"),
            std::string::npos);
  EXPECT_TRUE(RegexToGrammar("(((a)))", small).ok());
  small = GrammarLimits{};
  small.max_source_bytes = 8;
  EXPECT_NE(ErrorOf("abcdefghij", small).find("over the limit of 8"), std::string::npos);
  // Quadratic rewriting of an empty-matching repeated sequence is budgeted.
  small = GrammarLimits{};
  small.max_elements = 2000;
  std::string many = "(";
  for (int i = 0; i < 200; ++i) many += "a?";
  many += ")*";
  EXPECT_FALSE(RegexToGrammar(many, small).ok());
}

TEST(RegexTest, CatastrophicBacktrackingPatternsAreLinear) {
  // (a+)+b and (a|a)*c blow up backtracking engines; here they are matched by the pushdown
  // automaton and must finish at once.
  const Grammar g = Compile("(a+)+b");
  EXPECT_FALSE(Accepts(g, std::string(200, 'a')));
  EXPECT_TRUE(Accepts(g, std::string(200, 'a') + "b"));
  const Grammar h = Compile("(a|a)*c");
  EXPECT_FALSE(Accepts(h, std::string(200, 'a')));
}

TEST(RegexTest, JsonStringModeAndSearch) {
  GrammarBuilder b;
  RegexMode mode;
  mode.json_string = true;
  mode.search = true;
  StatusOr<int32_t> r = AddRegexRuleWithMode(&b, "^a\"\\\\\\n/|x$", "p", GrammarLimits{}, mode);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Grammar g = std::move(b).Build(*r);
  // A string's content as written inside JSON quotes.
  EXPECT_TRUE(Accepts(g, "a\\\"\\\\\\n/"));
  EXPECT_TRUE(Accepts(g, "a\\\"\\\\\\u000a\\/tail"));  // after ^...: anything may follow
  EXPECT_TRUE(Accepts(g, "headx"));                    // ...x$: anything may precede
  EXPECT_FALSE(Accepts(g, "a\"\\\\\\n/"));             // a raw quote cannot be in a string
  EXPECT_FALSE(Accepts(g, "ha\\\"\\\\\\n/"));          // anchored at the start
  EXPECT_FALSE(Accepts(g, "xy"));
}

}  // namespace
}  // namespace vls::grammar
