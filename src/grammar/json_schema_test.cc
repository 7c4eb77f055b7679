#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/json_schema_test_util.h"
#include "grammar/matcher.h"

namespace vls::grammar {
namespace {

using testing_util::Accepts;
using testing_util::CompileForBytes;

std::shared_ptr<const CompiledGrammar> Schema(std::string_view text, bool strict = false) {
  JsonSchemaOptions options;
  options.strict = strict;
  StatusOr<Grammar> g = JsonSchemaToGrammar(text, options, GrammarLimits{});
  EXPECT_TRUE(g.ok()) << text << ": " << g.status().message();
  return g.ok() ? CompileForBytes(*g) : nullptr;
}

std::string ErrorOf(std::string_view text, const GrammarLimits& limits = {}) {
  StatusOr<Grammar> g = JsonSchemaToGrammar(text, JsonSchemaOptions{}, limits);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? std::string() : g.status().message();
}

struct Case {
  const char* schema;
  std::vector<const char*> yes;
  std::vector<const char*> no;
};

void Check(const std::vector<Case>& cases, bool strict = false) {
  for (const Case& c : cases) {
    const auto g = Schema(c.schema, strict);
    for (const char* s : c.yes) EXPECT_TRUE(Accepts(g, s)) << c.schema << " should accept " << s;
    for (const char* s : c.no) EXPECT_FALSE(Accepts(g, s)) << c.schema << " accepted " << s;
  }
}

TEST(JsonSchemaTest, TypesAndAnyValue) {
  Check({
      {R"({})",
       {"1", "-0.5e+3", "\"x\"", "true", "null", "[]", "{}", R"({"a":[1,{"b":null}]})"},
       {"", "tru", "01", "1.", "'x'", "[1,]", "{\"a\"}", "nul"}},
      {R"(true)", {"[1, 2]"}, {"[1 2]"}},
      {R"({"type":"null"})", {"null"}, {"0", "\"null\""}},
      {R"({"type":"boolean"})", {"true", "false"}, {"1", "null"}},
      {R"({"type":"integer"})", {"0", "-12", "12345678901234567890"}, {"1.5", "01", "1e3", "-"}},
      {R"({"type":"number"})", {"0", "-1.25", "1e-7", "2.5E+10"}, {".5", "1.", "+1", "1e"}},
      {R"({"type":"string"})",
       {R"("")", R"("a\"b\\c\/\n\u00e9\uFFFF")", "\"\xc3\xa9\""},
       {R"("a)", "\"\n\"", R"("\x")", R"("\ud800")", R"("\u12")"}},
      {R"({"type":["string","null"]})", {"null", "\"a\""}, {"1"}},
      {R"({"type":["integer","number"]})", {"1", "1.5"}, {"\"1\""}},
  });
}

TEST(JsonSchemaTest, WhitespaceIsBounded) {
  const auto g = Schema(R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(Accepts(g, "[ 1 , 2 ]"));
  EXPECT_TRUE(Accepts(g, "[\n  1,\n\t2\n]"));
  EXPECT_TRUE(Accepts(g, "[\n" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(Accepts(g, "[\n" + std::string(21, ' ') + "1]"));
  EXPECT_FALSE(Accepts(g, "[  1]"));    // two blanks
  EXPECT_FALSE(Accepts(g, "[\n\n1]"));  // two newlines
  EXPECT_FALSE(Accepts(g, " [1]"));     // nothing before the value
  EXPECT_FALSE(Accepts(g, "[1] "));     // nor after it
  EXPECT_FALSE(Accepts(g, "[\r\n1]"));
}

TEST(JsonSchemaTest, Objects) {
  Check({
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
           "required":["a"]})",
       {R"({"a":1})", R"({"a":1,"b":"x"})", R"({ "a" : 1 , "b" : "x" })", R"({"a":1,"z":2})"},
       {R"({})", R"({"b":"x"})", R"({"b":"x","a":1})", R"({"a":"1"})", R"({"a":1,})",
        R"({"a":1,"a":2})", R"({"a":1,"b":"x","b":"y"})"}},
      {R"({"properties":{"a":{},"b":{},"c":{}},"additionalProperties":false})",
       {R"({})", R"({"a":1})", R"({"b":1})", R"({"a":1,"c":3})", R"({"a":1,"b":2,"c":3})"},
       {R"({"c":1,"a":2})", R"({"d":1})", R"({,"a":1})", R"({"a":1,,"b":2})"}},
      {R"({"properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
       {R"({"a":1,"b":"x","c":"y"})", R"({"b":"x"})", R"({"ab":"x"})", R"({"":"x"})"},
       {R"({"b":1})", R"({"a":1,"a":"x"})", R"({"b":"x","a":1})"}},
      {R"({"required":["x"]})", {R"({"x":[]})", "1"}, {R"({})", R"({"y":1})"}},
      {R"({"type":"object","properties":{"a":false}})", {R"({})", R"({"b":1})"}, {R"({"a":1})"}},
  });
  // Strict mode: no additionalProperties means none.
  Check({{R"({"type":"object","properties":{"a":{"type":"integer"}}})",
          {R"({"a":1})", R"({})"},
          {R"({"a":1,"b":2})"}}},
        /*strict=*/true);
}

TEST(JsonSchemaTest, Arrays) {
  Check({
      {R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
       {"[1,2]", "[1,2,3]"},
       {"[]", "[1]", "[1,2,3,4]", "[1,\"2\"]"}},
      {R"({"prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})",
       {"[]", "[1]", "[1,\"a\"]"},
       {"[\"a\"]", "[1,\"a\",2]"}},
      {R"({"prefixItems":[{"type":"integer"}],"items":{"type":"boolean"},"minItems":2})",
       {"[1,true]", "[1,true,false]"},
       {"[1]", "[true,true]", "[1,2]"}},
      {R"({"items":[{"const":1}],"additionalItems":{"type":"string"}})",
       {"[1]", "[1,\"a\",\"b\"]"},
       {"[2]", "[1,2]"}},
      {R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"}},
      {R"({"type":"array","items":false})", {"[]"}, {"[1]"}},
  });
}

TEST(JsonSchemaTest, EnumConstAnyOfRefs) {
  Check({
      {R"({"enum":["a",1,null,[1,{"k":true}]]})",
       {"\"a\"", "1", "null", "[1,{\"k\":true}]", "[ 1, { \"k\": true } ]"},
       {"\"b\"", "2", "[1]", "1.0"}},
      {R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"}},
      {R"({"const":"x\"y"})", {R"("x\"y")"}, {"\"x\""}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})",
       {"1", "\"a\""},
       {"\"ab\"", "null"}},
      {R"({"oneOf":[{"type":"integer"},{"type":"null"}]})", {"1", "null"}, {"\"1\""}},
      {R"({"type":"object","properties":{"a":{}},"anyOf":[{"required":["a"]}]})",
       {R"({"a":1})"},
       {R"({})"}},
      {R"({"allOf":[{"type":"integer"},{"minimum":3},{"maximum":5}]})",
       {"3", "5"},
       {"2", "6", "4.5"}},
      {R"({"$defs":{"n":{"type":"integer"}},"type":"array","items":{"$ref":"#/$defs/n"}})",
       {"[1,2]"},
       {"[\"a\"]"}},
      {R"({"definitions":{"a/b":{"const":1}},"$ref":"#/definitions/a~1b"})", {"1"}, {"2"}},
      {R"({"$defs":{"tree":{"type":"object","properties":{"v":{"type":"integer"},
            "kids":{"type":"array","items":{"$ref":"#/$defs/tree"}}},
            "additionalProperties":false}},"$ref":"#/$defs/tree"})",
       {R"({"v":1,"kids":[{"v":2,"kids":[{"kids":[]}]}]})"},
       {R"({"v":1,"kids":[{"v":"x"}]})"}},
      {R"({"type":"object","properties":{"next":{"$ref":"#"}},"additionalProperties":false})",
       {R"({"next":{"next":{}}})"},
       {R"({"next":{"x":1}})"}},
  });
}

TEST(JsonSchemaTest, StringsPatternsFormats) {
  Check({
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("a\nc")", "\"\xc3\xa9\xc3\xa9\"", R"("\u00e9\u00e9")"},
       {R"("a")", R"("abcd")"}},
      {R"({"type":"string","pattern":"^[a-z]+\\d$"})", {R"("ab1")"}, {R"("ab")", R"("1")"}},
      {R"({"type":"string","pattern":"b+"})", {R"("abba")", R"("b")"}, {R"("aa")"}},
      {R"({"type":"string","pattern":"^\"$"})", {R"("\"")"}, {R"(""")"}},
      {R"({"type":"string","format":"date"})",
       {R"("2024-02-29")", R"("2000-02-29")", R"("2023-12-31")", R"("2023-04-30")"},
       {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")",
        R"("2023-1-01")"}},
      {R"({"type":"string","format":"time"})",
       {R"("12:34:56Z")", R"("23:59:60Z")", R"("08:30:00.123+05:30")", R"("08:30:00z")"},
       {R"("12:34:56")", R"("24:00:00Z")", R"("22:59:60Z")", R"("12:60:00Z")"}},
      {R"({"type":"string","format":"date-time"})",
       {R"("2024-01-02T03:04:05Z")", R"("2024-01-02t03:04:05-01:00")"},
       {R"("2024-01-02 03:04:05Z")", R"("2024-01-02T03:04:05")"}},
      {R"({"type":"string","format":"uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")", R"("123E4567-E89B-12D3-A456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400")"}},
      {R"({"type":"string","format":"email"})",
       {R"("joe.bloggs@example.com")", R"("te~st@a-b.example")", R"("a\/b@x.io")"},
       {R"("joe@example")", R"(".joe@example.com")", R"("jo..e@example.com")",
        R"("joe@-example.com")", R"("joe")"}},
      {R"({"type":"string","format":"ipv4"})",
       {R"("192.168.0.1")", R"("0.0.0.0")"},
       {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")"}},
  });
}

TEST(JsonSchemaTest, NumberBounds) {
  Check({
      {R"({"type":"integer","minimum":-15,"maximum":120})",
       {"-15", "-9", "0", "9", "10", "99", "100", "120"},
       {"-16", "-20", "121", "200", "1000", "-0.5"}},
      {R"({"type":"integer","exclusiveMinimum":0})", {"1", "12345"}, {"0", "-1"}},
      {R"({"type":"integer","minimum":1.5,"exclusiveMaximum":4})", {"2", "3"}, {"1", "4"}},
      {R"({"type":"integer","maximum":-3})", {"-3", "-400"}, {"-2", "0", "3"}},
      {R"({"type":"integer","minimum":0,"maximum":0})", {"0"}, {"1", "-1", "-0"}},
      {R"({"type":"number","minimum":0,"maximum":1})",
       {"0", "1", "0.5", "0.001", "1.0", "0.50"},
       {"-0.5", "1.5", "2", "1e-3", "1.01", "-0.0001"}},
      {R"({"type":"number","minimum":1.1})",
       {"1.1", "1.10", "1.15", "1.2", "2", "1234.5"},
       {"1.09", "1.0", "1", "0.5", "-1.2"}},
      {R"({"type":"number","exclusiveMinimum":1.1,"maximum":7.25})",
       {"1.11", "7.25", "7", "7.2"},
       {"1.1", "1.10", "7.26", "8"}},
      {R"({"type":"number","exclusiveMaximum":-2.5})",
       {"-2.51", "-3", "-700.5"},
       {"-2.5", "-2.49", "-2", "0"}},
      {R"({"type":"number","exclusiveMinimum":-1,"exclusiveMaximum":1})",
       {"0", "-0.5", "0.999"},
       {"-1", "1", "1.5", "-1.5"}},
      {R"({"type":"number","minimum":-2.5})",
       {"-2", "0", "12.75", "-2.5", "-2.25", "-0.5"},
       {"-3", "-2.75", "-2.51"}},
      {R"({"minimum":5,"exclusiveMinimum":true})", {"6", "\"s\""}, {"5"}},
  });
}

TEST(JsonSchemaTest, RefusesKeywordsByNameAndPath) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"not":{}})", "unsupported keyword \"not\" at /"},
      {R"({"properties":{"a":{"properties":{"b":{"contains":{}}}}}})",
       "unsupported keyword \"contains\" at /properties/a/properties/b"},
      {R"({"items":{"uniqueItems":true}})", "unsupported keyword \"uniqueItems\" at /items"},
      {R"({"anyOf":[{"if":{}}]})", "unsupported keyword \"if\" at /anyOf/0"},
      {R"({"patternProperties":{}})", "unsupported keyword \"patternProperties\""},
      {R"({"multipleOf":2})", "unsupported keyword \"multipleOf\""},
      {R"({"$defs":{"a~b/c":{"minProperties":1}},"$ref":"#/$defs/a~0b~1c"})",
       "unsupported keyword \"minProperties\" at /$defs/a~0b~1c"},
      {R"({"$ref":"http://example.com/s.json"})", "unsupported \"$ref\" \"http://example.com"},
      {R"({"$ref":"#/$defs/missing"})", "unresolved \"$ref\" \"#/$defs/missing\""},
      {R"({"$ref":"#/$defs/a","type":"string"})", "keyword \"type\" beside \"$ref\""},
      {R"({"type":"string","format":"hostname"})", "unsupported format \"hostname\" at /"},
      {R"j({"type":"string","pattern":"(?=a)"})j",
       "invalid \"pattern\" at /: regex: lookahead is not supported at offset 0"},
      {R"({"type":"string","pattern":"a","maxLength":3})",
       "keyword \"maxLength\" beside \"pattern\""},
      {R"({"enum":[1],"minimum":0})", "keyword \"minimum\" beside \"enum\""},
      {R"({"minimum":1.2,"maximum":1.5})", "both bounds of a number within one integer unit"},
      {R"({"allOf":[{"const":1},{"const":2}]})", "allOf: keyword \"const\" differs"},
      {R"({"allOf":[{"properties":{"a":{}}},{"additionalProperties":false}]})",
       "keyword \"additionalProperties\""},
      {R"({"type":"strin"})", "invalid \"type\" at /"},
      {R"({"required":"a"})", "invalid \"required\" at /"},
      {R"({"type":"string","minLength":-1})", "invalid \"minLength\" at /"},
      {R"(false)", "accepts no value"},
      {R"({"type":"object","properties":{"a":false},"required":["a"]})", "accepts no value"},
      {R"({"$ref":"#"})", "left"},
  };
  for (const auto& [schema, message] : cases) {
    const std::string error = ErrorOf(schema);
    EXPECT_NE(error.find(message), std::string::npos) << schema << " -> " << error;
  }
  // Annotations are ignored.
  EXPECT_TRUE(JsonSchemaToGrammar(
                  std::string_view(
                      R"({"title":"t","description":"d","examples":[1],"default":1,"$schema":"s",
                      "$id":"i","$comment":"c","deprecated":true,"readOnly":false,
                      "writeOnly":false,"type":"integer"})"),
                  JsonSchemaOptions{}, GrammarLimits{})
                  .ok());
}

TEST(JsonSchemaTest, BoundsBeforeCompiling) {
  GrammarLimits limits;
  EXPECT_NE(ErrorOf(R"({"type":"array","minItems":1001})").find("over the limit of 1000"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","maxLength":5000})").find("\"maxLength\" at /"),
            std::string::npos);
  std::string big_enum = R"({"enum":[)";
  for (int i = 0; i < 10001; ++i) big_enum += std::to_string(i) + (i < 10000 ? "," : "]}");
  EXPECT_NE(ErrorOf(big_enum).find("over the limit of 10000"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += R"({"items":)";
  deep += "{}";
  for (int i = 0; i < 70; ++i) deep += "}";
  EXPECT_NE(ErrorOf(deep).find("nests deeper than"), std::string::npos);
  limits.max_source_bytes = 16;
  EXPECT_NE(ErrorOf(R"({"type":"string","minLength":1})", limits).find("over the limit of 16"),
            std::string::npos);
  // Same for the object overload.
  const nlohmann::ordered_json schema = {{"type", "string"}, {"description", std::string(40, 'x')}};
  EXPECT_FALSE(JsonSchemaToGrammar(schema, JsonSchemaOptions{}, limits).ok());
  limits = GrammarLimits{};
  limits.max_rules = 50;
  EXPECT_NE(ErrorOf(R"({"type":"array","items":{"type":"string","maxLength":200}})", limits)
                .find("rules"),
            std::string::npos);
  // A reference cycle through objects is fine (it consumes input); $defs much used once.
  EXPECT_TRUE(JsonSchemaToGrammar(std::string_view(R"({"$defs":{"a":{"type":"array",
                                      "items":{"$ref":"#/$defs/a"}}}, "$ref":"#/$defs/a"})"),
                                  JsonSchemaOptions{}, GrammarLimits{})
                  .ok());
}

TEST(JsonSchemaTest, PrintedGrammarParsesBackAsGbnf) {
  // PrintGbnf is the cache key: the front end's rule names and classes must print and parse.
  StatusOr<Grammar> g =
      JsonSchemaToGrammar(std::string_view(R"({"type":"object","properties":{"a b":{"type":"string",
        "pattern":"^[\\x00-\\x1f\"\\\\]+$"},"n":{"type":"number","minimum":-1.5},
        "d":{"format":"date-time"},"e":{"enum":["x\"y",null]}},"additionalProperties":true})"),
                          JsonSchemaOptions{}, GrammarLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  const std::string printed = PrintGbnf(*g);
  StatusOr<Grammar> again = ParseGbnf(printed, GrammarLimits{});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(PrintGbnf(*again), printed);
  const auto c = CompileForBytes(*again);
  EXPECT_TRUE(Accepts(c, R"({"a b":"\u001f\"","n":-1.25,"d":"2020-01-01T00:00:00Z","e":null})"));
  EXPECT_FALSE(Accepts(c, R"({"a b":"x"})"));
}

TEST(JsonSchemaTest, AnyJsonObject) {
  const auto g = CompileForBytes(AnyJsonObjectGrammar());
  EXPECT_TRUE(Accepts(g, "{}"));
  EXPECT_TRUE(Accepts(g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(Accepts(g, "[]"));
  EXPECT_FALSE(Accepts(g, "1"));
  EXPECT_FALSE(Accepts(g, R"({"a":})"));
}

TEST(JsonSchemaTest, AddJsonSchemaRuleBesideOtherRules) {
  GrammarBuilder b;
  const int32_t other = b.AddRule("root-ws");  // a name the compiler would also like
  b.SetAlternatives(other, {b.Literal("x")});
  StatusOr<int32_t> r = AddJsonSchemaRule(&b, nlohmann::ordered_json{{"type", "integer"}}, "root",
                                          JsonSchemaOptions{}, GrammarLimits{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int32_t top = b.AddRule("top");
  b.SetAlternatives(top, {{b.Ref(other), b.Ref(*r)}});
  const Grammar g = std::move(b).Build(top);
  ASSERT_TRUE(ValidateGrammar(g, GrammarLimits{}).ok());
  EXPECT_TRUE(Accepts(g, "x12"));
  EXPECT_FALSE(Accepts(g, "12"));
}

}  // namespace
}  // namespace vls::grammar
