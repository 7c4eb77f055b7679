#include "runtime/structured_output_json.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/chat_json.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;
using Tools = StructuredOutput::Tools;

StructuredOutput Read(const std::string& text) {
  StructuredOutput so;
  Status s = StructuredOutputFromJson(Json::parse(text), &so);
  EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
  return so;
}

void ExpectRefused(const std::string& text, const std::string& param, const std::string& words) {
  StructuredOutput so;
  Status s = StructuredOutputFromJson(Json::parse(text), &so);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
  EXPECT_EQ(s.param(), param) << text << ": " << s.ToString();
  EXPECT_NE(s.message().find(words), std::string::npos) << text << ": " << s.ToString();
  EXPECT_EQ(so.kind, Kind::kNone);  // unchanged
}

const char* kTools = R"("tools": [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "g", "strict": false}}])";
const char* kStrictTools = R"("tools": [
    {"type": "function", "function": {"name": "f", "strict": true,
                                      "parameters": {"type": "object"}}}])";

TEST(StructuredOutputJsonTest, ResponseFormats) {
  EXPECT_FALSE(Read(R"({})").active());
  EXPECT_FALSE(Read(R"({"response_format": null})").active());
  EXPECT_FALSE(Read(R"({"response_format": {"type": "text"}})").active());
  EXPECT_EQ(Read(R"({"response_format": {"type": "json_object"}})").kind, Kind::kJsonObject);
  StructuredOutput ll = Read(R"({"response_format": {"type": "json_object",
                                                     "schema": {"type": "integer"}}})");
  EXPECT_EQ(ll.kind, Kind::kJsonSchema);
  EXPECT_EQ(ll.source, R"({"type":"integer"})");
  StructuredOutput oa = Read(R"({"response_format": {"type": "json_schema", "json_schema":
      {"name": "n", "description": "d", "strict": true,
       "schema": {"type": "object", "properties": {"b": {}, "a": {}}}}}})");
  EXPECT_EQ(oa.kind, Kind::kJsonSchema);
  EXPECT_TRUE(oa.strict);
  EXPECT_EQ(oa.source, R"({"type":"object","properties":{"b":{},"a":{}}})");  // order kept
  EXPECT_FALSE(Read(R"({"response_format": {"type": "json_schema",
                                            "json_schema": {"schema": {}}}})")
                   .strict);
}

TEST(StructuredOutputJsonTest, ExtraFields) {
  StructuredOutput js = Read(R"({"json_schema": {"type": "string"}})");
  EXPECT_EQ(js.kind, Kind::kJsonSchema);
  EXPECT_FALSE(js.strict);
  StructuredOutput g = Read(R"({"grammar": "root ::= \"a\""})");
  EXPECT_EQ(g.kind, Kind::kGbnf);
  EXPECT_EQ(g.source, "root ::= \"a\"");
  StructuredOutput re = Read(R"({"regex": "[0-9]+"})");
  EXPECT_EQ(re.kind, Kind::kRegex);
  EXPECT_EQ(re.source, "[0-9]+");
  // A text response_format beside one of them is no conflict.
  EXPECT_EQ(Read(R"({"response_format": {"type": "text"}, "regex": "a"})").kind, Kind::kRegex);
}

TEST(StructuredOutputJsonTest, Tools) {
  EXPECT_EQ(Read(std::string("{") + kTools + "}").tools, Tools::kFree);
  EXPECT_EQ(Read(std::string("{") + kTools + R"(, "tool_choice": "auto"})").tools, Tools::kFree);
  EXPECT_EQ(Read(std::string("{") + kTools + R"(, "tool_choice": "none"})").tools, Tools::kFree);
  EXPECT_EQ(Read(std::string("{") + kStrictTools + "}").tools, Tools::kStrict);
  EXPECT_EQ(Read(std::string("{") + kStrictTools + R"(, "tool_choice": "auto"})").tools,
            Tools::kStrict);
  EXPECT_EQ(Read(std::string("{") + kStrictTools + R"(, "tool_choice": "none"})").tools,
            Tools::kFree);
  EXPECT_EQ(Read(std::string("{") + kTools + R"(, "tool_choice": "required"})").tools,
            Tools::kRequired);
  StructuredOutput named =
      Read(std::string("{") + kTools +
           R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})");
  EXPECT_EQ(named.tools, Tools::kNamed);
  EXPECT_EQ(named.tool_name, "g");
  // Strict tools beside a reply format: the text follows the format, or calls follow.
  StructuredOutput both = Read(std::string("{") + kStrictTools + R"(, "regex": "a+"})");
  EXPECT_EQ(both.kind, Kind::kRegex);
  EXPECT_EQ(both.tools, Tools::kStrict);
}

TEST(StructuredOutputJsonTest, RefusalsNameTheField) {
  ExpectRefused(R"({"response_format": "json"})", "response_format", "object");
  ExpectRefused(R"({"response_format": {}})", "response_format.type", "json_schema");
  ExpectRefused(R"({"response_format": {"type": "xml"}})", "response_format.type", "\"xml\"");
  ExpectRefused(R"({"response_format": {"type": "text", "schema": {}}})", "response_format.schema",
                "not a field");
  ExpectRefused(R"({"response_format": {"type": "json_schema"}})", "response_format.json_schema",
                "object");
  ExpectRefused(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
                "response_format.json_schema.schema", "required");
  ExpectRefused(R"({"response_format": {"type": "json_schema",
                                        "json_schema": {"schema": {}, "strict": "yes"}}})",
                "response_format.json_schema.strict", "strict");
  ExpectRefused(R"({"response_format": {"type": "json_schema",
                                        "json_schema": {"schema": {}, "schma": {}}}})",
                "response_format.json_schema.schma", "not a known field");
  ExpectRefused(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}})",
                "response_format.json_schema.schema", "JSON Schema");
  ExpectRefused(R"({"json_schema": "{}"})", "json_schema", "JSON Schema object");
  ExpectRefused(R"({"grammar": 1})", "grammar", "GBNF");
  ExpectRefused(R"({"regex": ["a"]})", "regex", "regular expression");
  ExpectRefused(R"({"json_schema": {}, "grammar": "root ::= \"a\""})", "grammar",
                "cannot be combined with \"json_schema\"");
  ExpectRefused(R"({"response_format": {"type": "json_object"}, "regex": "a"})", "regex",
                "\"response_format\"");
  ExpectRefused(R"({"tool_choice": "required"})", "tool_choice", "needs \"tools\"");
  ExpectRefused(R"({"tools": [], "tool_choice": "auto"})", "tool_choice", "needs \"tools\"");
  ExpectRefused(std::string("{") + kTools + R"(, "tool_choice": "always"})", "tool_choice",
                "\"required\"");
  ExpectRefused(std::string("{") + kTools +
                    R"(, "tool_choice": {"type": "function", "function": {"name": "h"}}})",
                "tool_choice", "\"h\", which is not in tools");
  ExpectRefused(std::string("{") + kTools + R"(, "tool_choice": {"type": "function"}})",
                "tool_choice", "name");
  ExpectRefused(R"({"tools": [{"type": "function", "function": {"name": "f", "strict": 1}}]})",
                "tools[0].function.strict", "strict");
  ExpectRefused(R"({"tools": [{"type": "function", "function": {"name": ""}}]})",
                "tools[0].function.name", "non-empty");
  ExpectRefused(R"({"tools": [{"type": "function", "function": {"name": "f"}},
                              {"type": "retrieval"}]})",
                "tools[1].type", "\"function\"");
  ExpectRefused(R"({"tools": [{"type": "function", "function": {"name": "f",
                                                               "parameters": []}}]})",
                "tools[0].function.parameters", "JSON Schema");
  ExpectRefused(std::string("{") + kTools + R"(, "tool_choice": "required", "regex": "a"})",
                "regex", "tool calls only");
}

TEST(StructuredOutputJsonTest, ChatRequestCarriesIt) {
  const SamplingParams d;
  auto r = ChatRequestFromJsonText(
      R"({"messages": [{"role": "user", "content": "x"}], "regex": "[a-z]+"})", d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->structured.kind, Kind::kRegex);
  auto t = ChatRequestFromJsonText(std::string(R"({"messages": [{"role": "user", "content": "x"}],
      )") + kTools + R"(, "tool_choice": "none"})",
                                   d);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->tools.is_null());  // hidden from the template
  auto bad = ChatRequestFromJsonText(
      R"({"messages": [{"role": "user", "content": "x"}], "grammar": 3})", d);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().param(), "grammar");
  EXPECT_EQ(bad.status().message().rfind("chat request: \"grammar\"", 0), 0u)
      << bad.status().ToString();
}

}  // namespace
}  // namespace vls
