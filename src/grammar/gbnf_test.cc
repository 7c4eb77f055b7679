// ParseGbnf: every piece of syntax, checked by what the parsed grammar accepts (a small
// memoised recogniser below, independent of the matcher); errors with their line:column;
// hostile inputs against GrammarLimits; PrintGbnf round trips; the example grammars of
// tests/grammar/gbnf.
#include "grammar/gbnf.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vls::grammar {
namespace {

// Whether `g` derives exactly `s`: the end positions of each (rule, start) are memoised; a valid
// grammar has no left recursion, so the recursion always ends.
class Recogniser {
 public:
  Recogniser(const Grammar& g, std::u32string s) : g_(g), s_(std::move(s)) {}
  bool Accepts() { return RuleEnds(g_.root, 0).count(s_.size()) != 0; }

 private:
  const std::set<size_t>& RuleEnds(int32_t rule, size_t start) {
    const auto key = std::make_pair(rule, start);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    std::set<size_t> ends;
    for (const Sequence& seq : g_.rules[static_cast<size_t>(rule)].alternatives) {
      std::set<size_t> at{start};
      for (const Element& e : seq) {
        std::set<size_t> next;
        for (const size_t p : at) {
          if (e.kind == Element::Kind::kChars) {
            if (p < s_.size() && Contains(g_.classes[static_cast<size_t>(e.index)], s_[p])) {
              next.insert(p + 1);
            }
          } else {
            const std::set<size_t>& sub = RuleEnds(e.index, p);
            next.insert(sub.begin(), sub.end());
          }
        }
        at = std::move(next);
      }
      ends.insert(at.begin(), at.end());
    }
    return memo_[key] = std::move(ends);
  }

  const Grammar& g_;
  std::u32string s_;
  std::map<std::pair<int32_t, size_t>, std::set<size_t>> memo_;
};

bool Accepts(const Grammar& g, const std::u32string& s) { return Recogniser(g, s).Accepts(); }

Grammar Parse(const std::string& text, const GrammarLimits& limits = GrammarLimits{}) {
  StatusOr<Grammar> g = ParseGbnf(text, limits);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\nin:\n" << text;
  return g.ok() ? std::move(g).value() : Grammar{};
}

std::string ErrorOf(const std::string& text, const GrammarLimits& limits = GrammarLimits{}) {
  StatusOr<Grammar> g = ParseGbnf(text, limits);
  EXPECT_FALSE(g.ok()) << "parsed:\n" << text;
  return g.ok() ? std::string() : g.status().message();
}

// Expects `text` to accept exactly the strings of `yes` among `yes` and `no`, and its printed
// form to accept the same.
void ExpectLanguage(const std::string& text, const std::vector<std::u32string>& yes,
                    const std::vector<std::u32string>& no) {
  const Grammar g = Parse(text);
  if (g.rules.empty()) return;
  const Grammar again = Parse(PrintGbnf(g));
  for (const auto& s : yes) {
    EXPECT_TRUE(Accepts(g, s)) << text;
    EXPECT_TRUE(Accepts(again, s)) << PrintGbnf(g);
  }
  for (const auto& s : no) {
    EXPECT_FALSE(Accepts(g, s)) << text;
    EXPECT_FALSE(Accepts(again, s)) << PrintGbnf(g);
  }
}

TEST(ParseGbnf, LiteralsAlternativesAndReferences) {
  ExpectLanguage("root ::= \"ab\" | other\nother ::= \"c\" more-2\nmore-2 ::= \"d\"\n",
                 {U"ab", U"cd"}, {U"", U"a", U"abc", U"c", U"dc"});
}

TEST(ParseGbnf, Repetitions) {
  ExpectLanguage("root ::= \"a\"*", {U"", U"a", U"aaaa"}, {U"b"});
  ExpectLanguage("root ::= \"a\"+", {U"a", U"aaa"}, {U""});
  ExpectLanguage("root ::= \"a\"? \"b\"", {U"b", U"ab"}, {U"aab"});
  ExpectLanguage("root ::= \"a\"{2}", {U"aa"}, {U"a", U"aaa"});
  ExpectLanguage("root ::= \"a\"{2,}", {U"aa", U"aaaaa"}, {U"a"});
  ExpectLanguage("root ::= \"a\"{1,3}", {U"a", U"aa", U"aaa"}, {U"", U"aaaa"});
  ExpectLanguage("root ::= \"a\"{0,2} \"b\"", {U"b", U"ab", U"aab"}, {U"aaab"});
  ExpectLanguage("root ::= \"a\"{ 1 , 2 }", {U"a", U"aa"}, {U"aaa"});
  ExpectLanguage("root ::= \"a\"{0}", {U""}, {U"a"});
  // A repetition applies to the whole literal, group, class or reference before it.
  ExpectLanguage("root ::= \"ab\"*", {U"abab"}, {U"aba", U"abb"});
  ExpectLanguage("root ::= (\"a\" | \"b\" \"c\")+", {U"abca", U"bc"}, {U"b", U"ac"});
  ExpectLanguage("root ::= [0-9]{2} x+\nx ::= \"x\"", {U"12x", U"00xxx"}, {U"1x", U"12"});
  ExpectLanguage("root ::= \"a\"{2}{3}", {U"aaaaaa"}, {U"aaaa", U"aaaaaaaa"});
  ExpectLanguage("root ::= \"a\"+?", {U"", U"aa"}, {U"b"});
}

TEST(ParseGbnf, GroupsNewlinesAndComments) {
  ExpectLanguage(
      "# leading comment\n"
      "\n"
      "root ::= (  # a comment inside\n"
      "    \"a\"\n"
      "    ( \"b\" |\n"
      "      \"c\" )\n"
      "  ) end   # trailing comment\n"
      "end ::=\n"
      "  \"!\" |\n"
      "  \"?\"\r\n"
      "\n",
      {U"ab!", U"ac?"}, {U"a!", U"abc!"});
  // A newline after `|` continues the rule; "" and an empty group alternative match empty.
  ExpectLanguage("root ::= \"x\" (\"y\" | ) \"\"", {U"x", U"xy"}, {U"y"});
  ExpectLanguage("root ::= \"x\" |", {U"x", U""}, {U"xx"});
  ExpectLanguage("root ::= a\ra ::= \"x\"\r", {U"x"}, {U""});
}

TEST(ParseGbnf, EscapesInLiteralsAndClasses) {
  ExpectLanguage(R"(root ::= "\n\r\t\\\"\[\]\-\x41\u00e9\U0001F600")",
                 {U"\n\r\t\\\"[]-A\u00e9\U0001F600"}, {U"nrt"});
  ExpectLanguage(R"(root ::= [\n\t\]\-\\\x5E\u00E9] ["\[])",
                 {U"\n\"", U"]\"", U"-[", U"\\[", U"^\"", U"\u00e9["}, {U"a\"", U"n\""});
}

TEST(ParseGbnf, Classes) {
  ExpectLanguage("root ::= [a-cx]", {U"a", U"b", U"c", U"x"}, {U"d", U"", U"ab"});
  ExpectLanguage("root ::= [^a-c\\n]", {U"d", U"\u00e9", U"\U0010FFFF"}, {U"a", U"\n"});
  ExpectLanguage("root ::= [a-]", {U"a", U"-"}, {U"b"});
  ExpectLanguage("root ::= [-a]", {U"a", U"-"}, {U"b"});
  ExpectLanguage("root ::= .", {U"a", U"\n", U"\U0001F600"}, {U"", U"ab"});
  ExpectLanguage("root ::= [^] \"|\" []?", {U"x|"}, {U"x|x"});
}

TEST(ParseGbnf, UnicodeClasses) {
  ExpectLanguage("root ::= [α-ω]+", {U"αβγ", U"ω"}, {U"a", U"Ω"});
  ExpectLanguage("hira ::= [ぁ-ゟ]\nroot ::= hira{2}", {U"ぁゟ"}, {U"ぁ", U"aぁ"});
  ExpectLanguage("root ::= [^α-ω]", {U"a", U"Ω", U"\U0001F600"}, {U"β"});
  ExpectLanguage("root ::= [\\U0001F600-\\U0001F64F] \"é\"", {U"\U0001F610é"},
                 {U"\U0001F650é", U"\U0001F610e"});
  // Ranges across the surrogates skip them; the class is still whole on either side.
  ExpectLanguage("root ::= [\\uD7FF-\\uE000]", {U"\uD7FF", U"\uE000"}, {U"\uE001"});
}

TEST(ParseGbnf, RuleNamesWithDashesAndDigits) {
  const Grammar g = Parse("root ::= my-rule2 3d\nmy-rule2 ::= \"a\"\n3d ::= \"b\"\n");
  ASSERT_EQ(g.rules.size(), 3u);
  EXPECT_EQ(g.rules[1].name, "my-rule2");
  EXPECT_EQ(g.rules[2].name, "3d");
  EXPECT_TRUE(Accepts(g, U"ab"));
}

TEST(ParseGbnf, RulesComeOutInDefinitionOrder) {
  const Grammar g = Parse("a ::= \"x\"+ b\nroot ::= a\nb ::= \"y\"");
  ASSERT_EQ(g.rules.size(), 5u);
  EXPECT_EQ(g.rules[0].name, "a");
  EXPECT_EQ(g.rules[3].name, "root");
  EXPECT_EQ(g.rules[4].name, "b");
  EXPECT_EQ(g.root, 3);
}

TEST(ParseGbnf, Errors) {
  EXPECT_EQ(ErrorOf("root ::= a\n\nb ::= \"x\" undefined-1"), "GBNF line 1:10: undefined rule 'a'");
  EXPECT_EQ(ErrorOf("start ::= \"x\""), "GBNF: the grammar has no 'root' rule");
  EXPECT_EQ(ErrorOf(""), "GBNF: the grammar has no 'root' rule");
  std::string e = ErrorOf("root ::= x\nx ::= x \"a\" | \"b\"");
  EXPECT_EQ(e.rfind("GBNF line 2:1: rule 'x' is left-recursive (x -> x,", 0), 0u) << e;
  e = ErrorOf("root ::= a\na ::= b? c\nb ::= \"b\"\nc ::= \"c\"? a | \"d\"");
  EXPECT_NE(e.find("left-recursive (a -> c -> a,"), std::string::npos) << e;
  e = ErrorOf("root ::= \"a\" (\"b\"?)*");
  EXPECT_NE(e.find("GBNF line 1:20: rule 'root_3-star' is left-recursive"), std::string::npos) << e;
  e = ErrorOf("root ::= \"a\" loop\nloop ::= \"b\" loop");
  EXPECT_NE(e.find("can never finish"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf("root ::= \"abc"), "GBNF line 1:10: unterminated string literal");
  EXPECT_EQ(ErrorOf("root ::= [abc"), "GBNF line 1:10: unterminated character class");
  EXPECT_EQ(ErrorOf("root ::= [a-"), "GBNF line 1:10: unterminated character class");
  EXPECT_EQ(ErrorOf("root ::= \"\\q\""), "GBNF line 1:11: unknown escape: '\\' followed by 'q'");
  EXPECT_EQ(ErrorOf("root ::= \"\\x4\""), "GBNF line 1:11: expected 2 hex digits after '\\x'");
  EXPECT_EQ(ErrorOf("root ::= \"\\uD800\""),
            "GBNF line 1:11: escape names a surrogate, not a character");
  EXPECT_EQ(ErrorOf("root ::= [\\U00110000]"), "GBNF line 1:11: escape is past U+10FFFF");
  EXPECT_EQ(ErrorOf("root ::= [z-a]"), "GBNF line 1:11: character range is out of order");
  EXPECT_EQ(ErrorOf("root ::= \"\xC3\""), "GBNF line 1:11: invalid UTF-8");
  EXPECT_EQ(ErrorOf("root = \"a\""), "GBNF line 1:6: expected '::=' after 'root'");
  EXPECT_EQ(ErrorOf("root ::= \"a\"\nroot ::= \"b\""),
            "GBNF line 2:1: rule 'root' is defined twice (first at line 1:1)");
  EXPECT_EQ(ErrorOf("root ::= (\"a\""), "GBNF line 1:10: unclosed '('");
  EXPECT_EQ(ErrorOf("root ::= \"a\")"), "GBNF line 1:13: expected the end of the line, found ')'");
  EXPECT_EQ(ErrorOf("root ::= * \"a\""), "GBNF line 1:10: '*' has nothing before it to repeat");
  EXPECT_EQ(ErrorOf("root ::= \"a\" | +"), "GBNF line 1:16: '+' has nothing before it to repeat");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{3,2}"), "GBNF line 1:13: repetition {m,n} with n < m");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{x}"), "GBNF line 1:14: expected a number in '{...}'");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{2"), "GBNF line 1:15: expected '}' to close '{'");
  EXPECT_EQ(ErrorOf("root ::= <think>"),
            "GBNF line 1:10: token references (<...>, !<...>) are not supported");
  EXPECT_EQ(ErrorOf("root ::= \"a\"\n| \"b\""),
            "GBNF line 2:1: expected a rule name (letters, digits and '-')");
  EXPECT_EQ(ErrorOf("root ::= \"a\" b ::= \"c\""),
            "GBNF line 1:16: expected the end of the line, found ':'");
  EXPECT_EQ(ErrorOf(std::string("root ::= \"a\"\0", 13)),
            "GBNF line 1:13: expected the end of the line, found 0x00");
  // Column counts code points.
  EXPECT_EQ(ErrorOf("root ::= \"é\" undefined"), "GBNF line 1:14: undefined rule 'undefined'");
}

TEST(ParseGbnf, Bounds) {
  GrammarLimits limits;
  limits.max_source_bytes = 16;
  EXPECT_NE(ErrorOf("root ::= \"abcdefgh\"", limits).find("max_source_bytes"), std::string::npos);
  EXPECT_EQ(ErrorOf("root ::= \"a\"{1001}"),
            "GBNF line 1:14: repetition count is over the limit of 1000 "
            "(GrammarLimits::max_repeat)");
  EXPECT_NE(ErrorOf("root ::= \"a\"{0,99999999999999999999}").find("max_repeat"),
            std::string::npos);
  // Nested repetitions cost their sum, not their product, and are bounded before building.
  const Grammar g = Parse("root ::= \"x\"{1000}{1000}{1000}");
  size_t elements = 0;
  for (const Rule& r : g.rules) {
    for (const Sequence& s : r.alternatives) elements += s.size();
  }
  EXPECT_LE(elements, 3001u);
  limits = GrammarLimits{};
  limits.max_elements = 2500;
  EXPECT_EQ(ErrorOf("root ::= \"x\"{1000}{1000}{1000}", limits),
            "GBNF line 1:25: more than 2500 elements (GrammarLimits::max_elements)");
  EXPECT_NE(ErrorOf("root ::= \"0123456789\"{1000}{1000}", limits).find("max_elements"),
            std::string::npos);
  std::string refs = "root ::=";
  for (int i = 0; i < 3000; ++i) refs += " x";
  EXPECT_NE(ErrorOf(refs + "\nx ::= \"x\"", limits).find("max_elements"), std::string::npos);
  limits = GrammarLimits{};
  limits.max_rules = 50;
  EXPECT_NE(ErrorOf("root ::= \"x\"{0,100}", limits).find("max_rules"), std::string::npos);
  std::string many = "root ::= r0\n";
  for (int i = 0; i < 60; ++i) many += "r" + std::to_string(i) + " ::= \"x\"\n";
  EXPECT_NE(ErrorOf(many, limits).find("max_rules"), std::string::npos);
  limits = GrammarLimits{};
  limits.max_enum = 3;
  EXPECT_NE(ErrorOf("root ::= \"a\" | \"b\" | \"c\" | \"d\"", limits).find("max_enum"),
            std::string::npos);
  // Deep parentheses fail by the nesting bound, never by the stack.
  const std::string deep = "root ::= " + std::string(100000, '(');
  EXPECT_EQ(ErrorOf(deep),
            "GBNF line 1:74: parentheses nested deeper than 64 (GrammarLimits::max_nesting)");
  EXPECT_TRUE(ParseGbnf("root ::= " + std::string(64, '(') + "\"a\"" + std::string(64, ')'),
                        GrammarLimits{})
                  .ok());
}

// Parsing PrintGbnf's text gives the same grammar: printing it again gives the same text.
void ExpectRoundTrip(const std::string& text) {
  const Grammar g = Parse(text);
  const std::string printed = PrintGbnf(g);
  const Grammar again = Parse(printed);
  EXPECT_EQ(PrintGbnf(again), printed) << text;
  EXPECT_EQ(again.rules.size(), g.rules.size()) << printed;
  EXPECT_EQ(again.root, g.root) << printed;
}

TEST(PrintGbnf, RoundTrips) {
  ExpectRoundTrip("root ::= \"a\"* b{2,5} (c | \"\") .\nb ::= [^\\x00-\\x1F\"\\\\]\nc ::= \"c\"+");
  ExpectRoundTrip("x ::= \"é\\U0001F600\\u2028\" [\\-\\]\\[^]\nroot ::= x | \"\\t\\r\\n\\\"\"");
  ExpectRoundTrip("root ::= [^\\u0085\\u2028] [α-ω] [^]");
  ExpectRoundTrip("root ::= \"x\"{3}{0,4} y\ny ::= \"\"");
}

std::string ReadExample(const std::string& name) {
  std::ifstream in(std::string(VLS_GBNF_DIR) + "/" + name, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

TEST(ExampleGrammars, ParseRoundTripAndAccept) {
  const std::map<std::string, std::pair<std::vector<std::u32string>, std::vector<std::u32string>>>
      cases = {
          {"arithmetic.gbnf",
           {{U"1+2=3\n", U"(a1 * 2.5) - x = y\n1=1\n"}, {U"1+2=3", U"=3\n", U"A=1\n"}}},
          {"json.gbnf",
           {{U"{\"a\": [1, -2.5e+3, true, null, \"\\u00e9\\n\"]}", U" \"ok\"", U"[]", U"0"},
            {U"{a:1}", U"[1,]", U"01", U"\"\n\""}}},
          {"list.gbnf", {{U"- a\n", U"- one\n- two é\n"}, {U"- \n", U"- a", U"- a\u2028b\n"}}},
          {"chess.gbnf",
           {{U"1. e4 e5\n2. Nf3 Nc6\n", U"1. O-O O-O-O+\n12. exd8=Q# Rxa1\n"},
            {U"1. e4 e5\n", U"1. e9 e5\n2. a3 a4\n", U"1. e4 e5\n0. a3 a4\n"}}},
      };
  for (const auto& [name, strings] : cases) {
    SCOPED_TRACE(name);
    const std::string text = ReadExample(name);
    ExpectRoundTrip(text);
    ExpectLanguage(text, strings.first, strings.second);
  }
}

}  // namespace
}  // namespace vls::grammar
