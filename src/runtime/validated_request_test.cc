// ValidatedRequest: the validator's mark that lets BatchEngine::Submit skip a second
// validation, and only for the model the request was validated against.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/batch_engine_test_util.h"
#include "runtime/request.h"

namespace vls {
namespace {

TEST(ValidatedRequestTest, RefusesWhatValidateRequestRefusesWithTheSameStatus) {
  auto lm = LoadModel("validated_refuse", 1, 16);
  ASSERT_NE(lm, nullptr);
  GenerationRequest bad = Text({1, 2, 3}, 0, 20);  // 3 + 20 > 16
  const Status direct = ValidateRequest(*lm, bad);
  ASSERT_FALSE(direct.ok());
  auto v = ValidatedRequest::Validate(*lm, std::move(bad));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().ToString(), direct.ToString());
}

TEST(ValidatedRequestTest, RunsAsTheSameRequestSubmittedUnchecked) {
  auto lm = LoadModel("validated_same", 2, 32);
  ASSERT_NE(lm, nullptr);
  std::map<uint64_t, std::vector<int32_t>> tokens;
  BatchEngine engine(*lm, [&](const TokenEvent& e) {
    if (e.token >= 0) tokens[e.request_id].push_back(e.token);
    return true;
  });
  auto v = ValidatedRequest::Validate(*lm, Text({5, 6, 7}, 0, 6));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->model(), lm.get());
  EXPECT_EQ((*v)->tokens, (std::vector<int32_t>{5, 6, 7}));
  auto a = engine.Submit(std::move(*v));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(v->model(), nullptr);  // moved from: no longer marked
  auto b = engine.Submit(Text({5, 6, 7}, 0, 6));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  engine.RunUntilIdle();
  EXPECT_EQ(tokens[*a].size(), 6u);
  EXPECT_EQ(tokens[*a], tokens[*b]);
}

TEST(ValidatedRequestTest, AnotherModelsMarkIsValidatedAgain) {
  auto big = LoadModel("validated_big", 1, 64);
  auto small = LoadModel("validated_small", 1, 16);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  auto v = ValidatedRequest::Validate(*big, Text({1, 2, 3}, 0, 40));  // fits 64, not 16
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  BatchEngine engine(*small, [](const TokenEvent&) { return true; });
  auto id = engine.Submit(std::move(*v));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("exceeds the context capacity 16"), std::string::npos)
      << id.status().ToString();
  // An unmarked one (default-constructed) is validated in full too.
  auto empty = engine.Submit(ValidatedRequest());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("the sequence is empty"), std::string::npos)
      << empty.status().ToString();
}

}  // namespace
}  // namespace vls
