// /tokenize and /detokenize bodies (tokenize_request.h): the accepted shapes, and every refusal
// naming its field as data.
#include "server/tokenize_request.h"

#include <gtest/gtest.h>

#include <string>

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;

TEST(TokenizeRequest, TextOrMessages) {
  auto r = ParseTokenizeRequest(Json::parse(R"({"content": "hi", "model": "m"})"), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r->text, "hi");
  EXPECT_FALSE(r->chat);
  r = ParseTokenizeRequest(Json::parse(R"({"prompt": "yo", "add_special": true})"), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r->text, "yo");
  r = ParseTokenizeRequest(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                      "add_generation_prompt": false})"),
                           {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->chat);
  EXPECT_FALSE(r->text);
  EXPECT_FALSE(r->chat->add_generation_prompt);
}

TEST(TokenizeRequest, RefusalsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"content": "a", "bogus": 1})", "bogus"},
      {R"({"content": 3})", "content"},
      {R"({"prompt": [1]})", "prompt"},
      {R"({})", "content"},
      {R"({"content": "a", "messages": []})", "content"},
  };
  for (const Case& c : cases) {
    auto r = ParseTokenizeRequest(Json::parse(c.body), {});
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(r.status().param(), c.param) << c.body << " -> " << r.status().ToString();
  }
  // A 100,000-character unknown field: named whole as data, the message bounded.
  Json big = Json::parse(R"({"content": "a"})");
  big[std::string(100000, 'k')] = 1;
  auto r = ParseTokenizeRequest(big, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().param().size(), 100000u);
  EXPECT_LT(r.status().message().size(), 300u);
}

TEST(DetokenizeRequest, IdsInRange) {
  auto ids = ParseDetokenizeRequest(Json::parse(R"({"tokens": [0, 5, 9], "model": "m"})"), 10);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 5, 9}));
  for (const char* body : {R"({"tokens": [10]})", R"({"tokens": [-1]})", R"({"tokens": ["a"]})",
                           R"({"tokens": 3})", R"({})", R"({"tokens": [1.5]})"}) {
    auto r = ParseDetokenizeRequest(Json::parse(body), 10);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().param(), "tokens") << body << " -> " << r.status().ToString();
  }
  auto r = ParseDetokenizeRequest(Json::parse(R"({"tokens": [], "x": 1})"), 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().param(), "x");
}

}  // namespace
}  // namespace vls::server
