#include "runtime/reply_text.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/pipeline_test_util.h"

namespace vls {
namespace {

constexpr int kVocab = 512;
constexpr int32_t kImEnd = kVocab - 1;

class ReplyTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tok::Tokenizer::FromJson(testing::TinyChatTokenizerJson(kVocab));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(*t);
  }

  ReplyText Reply(std::vector<std::string> stop) const {
    return ReplyText(TextStream(tokenizer_.get(), std::move(stop)));
  }

  static TokenEvent Event(int32_t token, int generated, FinishReason finish = FinishReason::kNone) {
    TokenEvent e;
    e.request_id = 3;
    e.token = token;
    e.finish = finish;
    e.prompt_tokens = 9;
    e.cached_tokens = 2;
    e.generated_tokens = generated;
    return e;
  }

  // Feeds the bytes of `text` as byte tokens (the last one finishing with `last`); returns the
  // engine callback's answers.
  static std::vector<bool> FeedBytes(ReplyText& r, const std::string& text, int first_generated,
                                     FinishReason last = FinishReason::kNone) {
    std::vector<bool> keep;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto id = static_cast<int32_t>(static_cast<unsigned char>(text[i]));
      keep.push_back(r.Feed(Event(id, first_generated + static_cast<int>(i),
                                  i + 1 == text.size() ? last : FinishReason::kNone)));
    }
    return keep;
  }

  std::unique_ptr<tok::Tokenizer> tokenizer_;
};

TEST_F(ReplyTextTest, CollectsTextUntilTakenAndRecordsTheEngineFinish) {
  ReplyText r = Reply({});
  FeedBytes(r, "hel", 1);
  EXPECT_EQ(r.TakeText(), "hel");
  EXPECT_EQ(r.text(), "");
  EXPECT_FALSE(r.finished());
  FeedBytes(r, "lo", 4, FinishReason::kLength);
  EXPECT_EQ(r.TakeText(), "lo");
  EXPECT_TRUE(r.finished());
  EXPECT_EQ(r.finish(), FinishReason::kLength);
  EXPECT_EQ(r.usage().prompt_tokens, 9);
  EXPECT_EQ(r.usage().cached_tokens, 2);
  EXPECT_EQ(r.usage().completion_tokens, 5);
}

TEST_F(ReplyTextTest, AStopStringCutsTheTextCancelsOnceAndIgnoresTheCancelledEvent) {
  ReplyText r = Reply({"xy", "<END>"});
  const std::vector<bool> keep = FeedBytes(r, "ab<END>cd", 1);
  // Every event keeps the request running except the one that completed "<END>".
  ASSERT_EQ(keep.size(), 9u);
  for (size_t i = 0; i < keep.size(); ++i) EXPECT_EQ(keep[i], i != 6) << i;
  EXPECT_EQ(r.text(), "ab");
  EXPECT_EQ(r.finish(), FinishReason::kStop);
  EXPECT_EQ(r.stop_index(), 1);
  EXPECT_EQ(r.stop_token(), -1);
  EXPECT_EQ(r.usage().completion_tokens, 7);  // the tokens after the stop change nothing
  // The engine's cancelled event after the stop string: swallowed, the finish stays kStop.
  TextDelta d;
  d.text = "stale";
  EXPECT_TRUE(r.Feed(Event(-1, 0, FinishReason::kCancelled), &d));
  EXPECT_EQ(d.text, "");
  EXPECT_EQ(d.finish, FinishReason::kNone);
  EXPECT_EQ(r.finish(), FinishReason::kStop);
}

TEST_F(ReplyTextTest, ADeltaIsHandedOutAndItsTextNotCollected) {
  ReplyText r = Reply({"<END>"});
  TextDelta d;
  EXPECT_TRUE(r.Feed(Event('o', 1), &d));
  EXPECT_EQ(d.text, "o");
  EXPECT_TRUE(r.Feed(Event('<', 2), &d));
  EXPECT_EQ(d.text, "");  // held: it may start the stop string
  EXPECT_TRUE(r.Feed(Event('k', 3), &d));
  EXPECT_EQ(d.text, "<k");
  EXPECT_TRUE(r.Feed(Event(kImEnd, 4, FinishReason::kStop), &d));
  EXPECT_EQ(d.finish, FinishReason::kStop);
  EXPECT_EQ(d.stop_token, kImEnd);
  EXPECT_EQ(d.usage.completion_tokens, 4);
  EXPECT_EQ(r.text(), "");
  EXPECT_EQ(r.stop_token(), kImEnd);
  EXPECT_EQ(r.stop_index(), -1);
}

TEST_F(ReplyTextTest, HeldTextIsReleasedWithTheEnginesErrorOrCancel) {
  for (FinishReason end : {FinishReason::kError, FinishReason::kCancelled}) {
    for (const std::string held : {"<E", "\xE4\xB8"}) {  // half a stop string, half a character
      ReplyText r = Reply({"<END>"});
      FeedBytes(r, "a" + held, 1);
      EXPECT_EQ(r.text(), "a");
      TokenEvent e = Event(-1, 3, end);
      e.error = end == FinishReason::kError ? "boom" : "";
      EXPECT_TRUE(r.Feed(e));
      EXPECT_EQ(r.text(), held == "<E" ? "a<E" : "a\xEF\xBF\xBD");
      EXPECT_EQ(r.finish(), end);
      EXPECT_EQ(r.error(), e.error);
    }
  }
}

}  // namespace
}  // namespace vls
