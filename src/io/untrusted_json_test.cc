#include "io/untrusted_json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace vls {
namespace {

using Json = nlohmann::json;

Status ParseText(std::string_view text, Json* out = nullptr) {
  Json j;
  Status s = ParseUntrustedJson("input", text, &j);
  if (out) *out = j;
  return s;
}

void ExpectError(std::string_view text, std::string_view needle) {
  Status s = ParseText(text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("input: ", 0), 0u) << s.message();
}

TEST(UntrustedJsonTest, ParsesValidJson) {
  Json j;
  ASSERT_TRUE(ParseText(R"({"a": [1, 2.5, "x", null, true], "b": {"c": -3}})", &j).ok());
  EXPECT_EQ(j["b"]["c"], -3);
  nlohmann::ordered_json o;
  ASSERT_TRUE(ParseUntrustedJson("o", R"({"z": 1, "a": 2})", &o).ok());
  EXPECT_EQ(o.begin().key(), "z");
}

TEST(UntrustedJsonTest, RefusesTrailingBytesAndNul) {
  ExpectError("{} x", "invalid JSON");
  ExpectError(std::string_view("{}\0garbage", 10), "NUL byte at offset 2");
  ExpectError("", "invalid JSON");
  ExpectError(std::string_view(), "invalid JSON");  // no bytes at all: data() is null
  ExpectError("{\"a\": }", "invalid JSON");
}

TEST(UntrustedJsonTest, BoundsNesting) {
  std::string ok(kMaxUntrustedJsonDepth, '[');
  ok.append(kMaxUntrustedJsonDepth, ']');
  EXPECT_TRUE(ParseText(ok).ok());
  std::string deep(kMaxUntrustedJsonDepth + 1, '[');
  deep.append(kMaxUntrustedJsonDepth + 1, ']');
  ExpectError(deep, "nests deeper than 64 levels");
  // A million levels (objects and arrays mixed) is refused without recursing.
  std::string huge;
  for (int i = 0; i < 500000; ++i) huge += "{\"a\":[";
  ExpectError(huge, "nests deeper");
  JsonParseOptions shallow;
  shallow.max_depth = 2;
  shallow.code = StatusCode::kInvalidArgument;
  Json j;
  Status s = ParseUntrustedJson("req", "[[[1]]]", &j, shallow);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(UntrustedJsonTest, RefusesDuplicateKeysAtAnyDepth) {
  ExpectError(R"({"a": 1, "a": 2})", "key 'a' appears twice");
  ExpectError(R"({"x": [{"b": 1, "c": 2, "b": 3}]})", "key 'b' appears twice");
  // Equal keys in different objects are fine.
  EXPECT_TRUE(ParseText(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})").ok());
  // Control bytes in a key are escaped in the message.
  ExpectError("{\"\\u0001\": 1, \"\\u0001\": 2}", "'\\x01'");
}

TEST(UntrustedJsonTest, ManyKeysParseInLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  text += "}";
  const auto start = std::chrono::steady_clock::now();
  Json j;
  ASSERT_TRUE(ParseText(text, &j).ok());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(j.size(), 200000u);
  EXPECT_LT(s, 10.0);  // about 0.3 s on the CI machine; quadratic work would take minutes
}

TEST(UntrustedJsonTest, ReadIntIsStrict) {
  int64_t v = 0;
  EXPECT_TRUE(ReadJsonInt(Json(7), "n", 0, 10, &v).ok());
  EXPECT_EQ(v, 7);
  EXPECT_TRUE(ReadJsonInt(Json(-3), "n", -5, 10, &v).ok());
  EXPECT_EQ(v, -3);
  Json big;
  ASSERT_TRUE(ParseText("4294967297", &big).ok());
  Status s = ReadJsonInt(big, "max_new_tokens", 0, 1 << 20, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_new_tokens must be an integer in [0, 1048576], not 4294967297"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(ReadJsonInt(Json(2.7), "n", 0, 10, &v).ok());
  EXPECT_FALSE(ReadJsonInt(Json(2.0), "n", 0, 10, &v).ok());
  EXPECT_FALSE(ReadJsonInt(Json(true), "n", 0, 10, &v).ok());
  EXPECT_FALSE(ReadJsonInt(Json("3"), "n", 0, 10, &v).ok());
  EXPECT_FALSE(ReadJsonInt(Json(nullptr), "n", 0, 10, &v).ok());
  EXPECT_FALSE(ReadJsonInt(Json(-1), "n", 0, 10, &v).ok());
  Json huge_unsigned;
  ASSERT_TRUE(ParseText("18446744073709551615", &huge_unsigned).ok());
  EXPECT_FALSE(ReadJsonInt(huge_unsigned, "n", INT64_MIN, INT64_MAX, &v).ok());
}

TEST(UntrustedJsonTest, ReadBoolStringNumber) {
  bool b = false;
  EXPECT_TRUE(ReadJsonBool(Json(true), "flag", &b).ok());
  EXPECT_TRUE(b);
  Status s = ReadJsonBool(Json(nullptr), "add_generation_prompt", &b);
  EXPECT_NE(s.message().find("add_generation_prompt must be true or false, not null"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(ReadJsonBool(Json(1), "flag", &b).ok());
  std::string str;
  EXPECT_TRUE(ReadJsonString(Json("hi"), "s", &str).ok());
  EXPECT_EQ(str, "hi");
  EXPECT_FALSE(ReadJsonString(Json(5), "s", &str).ok());
  double d = 0;
  EXPECT_TRUE(ReadJsonNumber(Json(0.5), "t", 0.0, 2.0, &d).ok());
  EXPECT_TRUE(ReadJsonNumber(Json(1), "t", 0.0, 2.0, &d).ok());
  EXPECT_EQ(d, 1.0);
  EXPECT_FALSE(ReadJsonNumber(Json(2.5), "t", 0.0, 2.0, &d).ok());
  EXPECT_FALSE(ReadJsonNumber(Json("1"), "t", 0.0, 2.0, &d).ok());
}

TEST(UntrustedJsonTest, SafeDumpAndSnippetNeverThrowOnBadUtf8) {
  Json j = {{"error", std::string("cut in the middle \xE2\x82")}};
  std::string out;
  EXPECT_NO_THROW(out = DumpJsonSafe(j));
  EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos);
  Json long_string = std::string(100, 'x') + "\xE2\x82\xAC";
  std::string snippet = JsonSnippet(long_string, 20);
  EXPECT_LE(snippet.size(), 20u);
  EXPECT_EQ(JsonSnippet(Json::array({1, 2})), "[...]");
  EXPECT_EQ(JsonTypeName(Json(nullptr)), "null");
  EXPECT_EQ(JsonTypeName(Json(false)), "false");
}

}  // namespace
}  // namespace vls
