// The runtime's side of structured output: the model vocabulary the matcher sees, the tool-call
// grammar in Qwen3's format, the compile errors' fields, and the compiled-grammar cache.
#include "runtime/structured_output_grammar.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runtime/grammar_vocab.h"
#include "runtime/pipeline_test_util.h"
#include "runtime/tool_call_grammar.h"
#include "tokenizer/tokenizer.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;
using Tools = StructuredOutput::Tools;

constexpr int kVocab = 512;
constexpr int32_t kToolCallId = 300;  // an added token that is not special, as in Qwen3

std::unique_ptr<tok::Tokenizer> TestTokenizer() {
  Json j = Json::parse(testing::TinyChatTokenizerJson(kVocab));
  j["added_tokens"].push_back(
      {{"id", kToolCallId}, {"content", "<tool_call>"}, {"special", false}, {"normalized", false}});
  auto t = tok::Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(GrammarVocabTest, BytesAndUsableTokens) {
  auto t = TestTokenizer();
  ASSERT_TRUE(t);
  auto v = BuildGrammarVocab(*t, kVocab + 8);  // the model's vocabulary is larger
  ASSERT_EQ(v->size(), kVocab + 8);
  EXPECT_EQ(v->bytes['A'], "A");
  EXPECT_TRUE(v->usable['A']);
  EXPECT_EQ(v->bytes[258], "hell");
  EXPECT_TRUE(v->usable[258]);
  EXPECT_EQ(v->bytes[kToolCallId], "<tool_call>");  // written by grammars as its text
  EXPECT_TRUE(v->usable[kToolCallId]);
  EXPECT_FALSE(v->usable[kVocab - 1]);  // <|im_end|>: special
  EXPECT_FALSE(v->usable[400]);         // no token
  EXPECT_FALSE(v->usable[kVocab + 3]);  // past the tokenizer
  EXPECT_TRUE(v->bytes[kVocab + 3].empty());
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "strict": true,
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])";

// Whether `text` is a sentence of the grammar (through the matcher, byte by byte).
struct Checker {
  std::shared_ptr<const grammar::CompiledGrammar> g;
  bool Sentence(const std::string& text) const {
    grammar::GrammarMatcher m(g);
    return m.AcceptBytes(text) && m.CanEnd();
  }
  bool Prefix(const std::string& text) const {
    grammar::GrammarMatcher m(g);
    return m.AcceptBytes(text);
  }
};

Checker ToolChecker(Tools mode, const std::string& name = "", Kind kind = Kind::kNone,
                    const std::string& source = "") {
  StructuredOutput so;
  so.tools = mode;
  so.tool_name = name;
  so.kind = kind;
  so.source = source;
  auto t = TestTokenizer();
  auto g = ToolCallGrammar(Json::parse(kTools), so, grammar::GrammarLimits{});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok() || !t) return {};
  auto c = grammar::CompiledGrammar::Compile(*g, BuildGrammarVocab(*t, kVocab),
                                             grammar::GrammarLimits{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return Checker{c.ok() ? *c : nullptr};
}

const std::string kWeather =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
const std::string kNow = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

TEST(ToolCallGrammarTest, NamedFunction) {
  Checker c = ToolChecker(Tools::kNamed, "get_weather");
  ASSERT_TRUE(c.g);
  EXPECT_TRUE(c.Sentence(kWeather));
  EXPECT_FALSE(c.Sentence(kNow));
  EXPECT_FALSE(c.Sentence(kWeather + "\n" + kWeather));
  EXPECT_FALSE(c.Prefix("Sure! "));
  // Strict arguments: the required key, no other.
  EXPECT_FALSE(c.Prefix("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\""));
  EXPECT_FALSE(
      c.Sentence("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolCallGrammarTest, RequiredCalls) {
  Checker c = ToolChecker(Tools::kRequired);
  ASSERT_TRUE(c.g);
  EXPECT_TRUE(c.Sentence(kWeather));
  EXPECT_TRUE(c.Sentence(kNow));
  EXPECT_TRUE(c.Sentence(kWeather + "\n" + kNow));
  EXPECT_FALSE(c.Sentence(""));
  EXPECT_FALSE(c.Prefix("I will call"));
  EXPECT_FALSE(c.Prefix("<tool_call>\n{\"name\": \"later\""));
}

TEST(ToolCallGrammarTest, StrictToolsAfterFreeText) {
  Checker c = ToolChecker(Tools::kStrict);
  ASSERT_TRUE(c.g);
  EXPECT_TRUE(c.Sentence(""));
  EXPECT_TRUE(c.Sentence("It is sunny <tool_c or < not a tag."));
  EXPECT_TRUE(c.Sentence("Let me look.\n" + kWeather));
  EXPECT_TRUE(c.Sentence(kNow + "\n" + kWeather));
  // A tag starts a call that must follow the schema; text never holds one.
  EXPECT_FALSE(c.Prefix("Hi <tool_call>oops"));
  EXPECT_FALSE(c.Sentence(kWeather + " and more text"));
}

TEST(ToolCallGrammarTest, StrictToolsBesideAReplyFormat) {
  Checker c = ToolChecker(Tools::kStrict, "", Kind::kRegex, "[0-9]+");
  ASSERT_TRUE(c.g);
  EXPECT_TRUE(c.Sentence("42"));
  EXPECT_TRUE(c.Sentence(kNow));
  EXPECT_FALSE(c.Sentence("hello"));
}

TEST(ToolCallGrammarTest, ABadParametersSchemaNamesItsTool) {
  StructuredOutput so;
  so.tools = Tools::kRequired;
  Json tools = Json::parse(kTools);
  tools[1]["function"]["parameters"] = Json::parse(R"({"type": "object", "not": {}})");
  auto g = ToolCallGrammar(tools, so, grammar::GrammarLimits{});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().param(), "tools[1].function.parameters");
  EXPECT_NE(g.status().message().find("\"not\""), std::string::npos) << g.status().ToString();
}

TEST(GrammarCacheTest, HitsMissesAndEviction) {
  auto t = TestTokenizer();
  ASSERT_TRUE(t);
  GrammarCache cache(BuildGrammarVocab(*t, kVocab), grammar::GrammarLimits{}, 2);
  auto so = [](const std::string& re) {
    StructuredOutput s;
    s.kind = Kind::kRegex;
    s.source = re;
    return s;
  };
  auto a1 = cache.Get(so("a+"), nullptr);
  auto a2 = cache.Get(so("a+"), nullptr);
  ASSERT_TRUE(a1.ok() && a2.ok()) << a1.status().ToString();
  EXPECT_EQ(*a1, *a2);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  StructuredOutput gbnf;  // same text, other kind: another entry
  gbnf.kind = Kind::kGbnf;
  gbnf.source = "root ::= \"a\"+";
  ASSERT_TRUE(cache.Get(gbnf, nullptr).ok());
  ASSERT_TRUE(cache.Get(so("b+"), nullptr).ok());  // evicts "a+", the least recent
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.Get(so("a+"), nullptr).ok());
  EXPECT_EQ(cache.misses(), 4u);
  EXPECT_FALSE(cache.Get(so("(a"), nullptr).ok());  // failures are not kept
  EXPECT_FALSE(cache.Get(so("(a"), nullptr).ok());
  EXPECT_EQ(cache.misses(), 6u);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace vls
