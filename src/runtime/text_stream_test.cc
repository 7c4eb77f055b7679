#include "runtime/text_stream.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/pipeline_test_util.h"

namespace vls {
namespace {

constexpr int kVocab = 512;
constexpr int32_t kImEnd = kVocab - 1;
constexpr int32_t kEndOfText = kVocab - 2;

class TextStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tok::Tokenizer::FromJson(testing::TinyChatTokenizerJson(kVocab));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(*t);
  }

  static TokenEvent Event(int32_t token, int generated, FinishReason finish = FinishReason::kNone) {
    TokenEvent e;
    e.request_id = 7;
    e.token = token;
    e.finish = finish;
    e.prompt_tokens = 10;
    e.cached_tokens = 4;
    e.generated_tokens = generated;
    return e;
  }

  // Feeds the bytes of `text` as byte tokens (the last one finishing with `last`) and returns
  // the deltas.
  std::vector<TextDelta> FeedBytes(TextStream& s, const std::string& text,
                                   FinishReason last = FinishReason::kNone) {
    std::vector<TextDelta> out;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto id = static_cast<int32_t>(static_cast<unsigned char>(text[i]));
      out.push_back(s.Next(
          Event(id, static_cast<int>(i + 1), i + 1 == text.size() ? last : FinishReason::kNone)));
    }
    return out;
  }

  static std::string Joined(const std::vector<TextDelta>& d) {
    std::string s;
    for (const TextDelta& x : d) s += x.text;
    return s;
  }

  std::unique_ptr<tok::Tokenizer> tokenizer_;
};

TEST_F(TextStreamTest, StreamsTextAndFinishesByLengthWithUsage) {
  TextStream s(tokenizer_.get(), {});
  std::vector<TextDelta> d = FeedBytes(s, "hi!", FinishReason::kLength);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].text, "h");
  EXPECT_EQ(d[0].finish, FinishReason::kNone);
  EXPECT_EQ(d[2].text, "!");
  EXPECT_EQ(d[2].finish, FinishReason::kLength);
  EXPECT_EQ(d[2].usage.prompt_tokens, 10);
  EXPECT_EQ(d[2].usage.cached_tokens, 4);
  EXPECT_EQ(d[2].usage.completion_tokens, 3);
  EXPECT_FALSE(d[2].cancel_request);
  EXPECT_TRUE(s.finished());
}

TEST_F(TextStreamTest, StopStringCutsExactlyAndAsksToCancel) {
  TextStream s(tokenizer_.get(), {"<END>"});
  std::vector<TextDelta> d = FeedBytes(s, "ab<EN");
  EXPECT_EQ(Joined(d), "ab");  // "<EN" held
  TextDelta last = s.Next(Event('D', 6));
  EXPECT_EQ(last.text, "");
  last = s.Next(Event('>', 7));
  EXPECT_EQ(last.finish, FinishReason::kStop);
  EXPECT_EQ(last.stop_index, 0);
  EXPECT_TRUE(last.cancel_request);
  EXPECT_EQ(last.usage.completion_tokens, 7);
  // The engine's cancelled event that follows is swallowed.
  TextDelta after = s.Next(Event(-1, 7, FinishReason::kCancelled));
  EXPECT_EQ(after.finish, FinishReason::kNone);
  EXPECT_EQ(after.text, "");
}

TEST_F(TextStreamTest, StopStringOnTheLastTokenWinsOverLength) {
  TextStream s(tokenizer_.get(), {"yz"});
  std::vector<TextDelta> d = FeedBytes(s, "xyz", FinishReason::kLength);
  EXPECT_EQ(Joined(d), "x");
  EXPECT_EQ(d.back().finish, FinishReason::kStop);
  EXPECT_FALSE(d.back().cancel_request);  // the engine already finished it
}

TEST_F(TextStreamTest, EosAndSpecialTokensShowNoText) {
  TextStream s(tokenizer_.get(), {});
  EXPECT_EQ(s.Next(Event('o', 1)).text, "o");
  // An EOS emitted as an ordinary token (ignore_eos) is special: no text.
  EXPECT_EQ(s.Next(Event(kEndOfText, 2)).text, "");
  EXPECT_EQ(s.Next(Event('k', 3)).text, "k");
  TextDelta end = s.Next(Event(kImEnd, 4, FinishReason::kStop));
  EXPECT_EQ(end.text, "");
  EXPECT_EQ(end.finish, FinishReason::kStop);
  EXPECT_EQ(end.stop_token, kImEnd);
  EXPECT_EQ(end.stop_index, -1);
  EXPECT_EQ(end.usage.completion_tokens, 4);
}

TEST_F(TextStreamTest, AStopTokenIdThatIsNotSpecialShowsNoText) {
  TextStream s(tokenizer_.get(), {});
  EXPECT_EQ(s.Next(Event('a', 1)).text, "a");
  TextDelta end = s.Next(Event('b', 2, FinishReason::kStop));  // 'b' was a stop_token_id
  EXPECT_EQ(end.text, "");
  EXPECT_EQ(end.stop_token, 'b');
}

TEST_F(TextStreamTest, MultibyteCharactersAreNeverSplitAndStopStringsMatchThem) {
  TextStream s(tokenizer_.get(), {"界"});
  // "世" arrives as three byte tokens: nothing shows until the character is complete.
  std::vector<TextDelta> d = FeedBytes(s, "世");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].text, "");
  EXPECT_EQ(d[1].text, "");
  EXPECT_EQ(d[2].text, "世");
  d = FeedBytes(s, "界!");
  EXPECT_EQ(Joined(d), "");
  EXPECT_EQ(d[2].finish, FinishReason::kStop);  // at the third byte of 界
  EXPECT_TRUE(d[2].cancel_request);
}

TEST_F(TextStreamTest, AnIncompleteCharacterAtTheEndBecomesAReplacementCharacter) {
  TextStream s(tokenizer_.get(), {});
  std::vector<TextDelta> d = FeedBytes(s, std::string("a\xE4\xB8"), FinishReason::kLength);
  EXPECT_EQ(Joined(d), "a\xEF\xBF\xBD");
  EXPECT_EQ(d.back().finish, FinishReason::kLength);
}

TEST_F(TextStreamTest, HeldTextIsReleasedOnCancelAndError) {
  for (FinishReason r : {FinishReason::kCancelled, FinishReason::kError}) {
    TextStream s(tokenizer_.get(), {"<END>"});
    EXPECT_EQ(Joined(FeedBytes(s, "ok <E")), "ok ");
    TokenEvent e = Event(-1, 5, r);
    e.error = r == FinishReason::kError ? "boom" : "";
    TextDelta end = s.Next(e);
    EXPECT_EQ(end.text, "<E");
    EXPECT_EQ(end.finish, r);
    EXPECT_EQ(end.error, e.error);
    EXPECT_TRUE(s.finished());
  }
}

TEST_F(TextStreamTest, ACancelWithoutCountsKeepsTheUsageOfTheLastToken) {
  TextStream s(tokenizer_.get(), {});
  FeedBytes(s, "abc");  // three tokens
  const Usage before = s.usage();
  ASSERT_EQ(before.completion_tokens, 3);
  TokenEvent cancel;  // what BatchEngine::Cancel delivers: no token, no counts
  cancel.finish = FinishReason::kCancelled;
  const TextDelta end = s.Next(cancel);
  EXPECT_EQ(end.finish, FinishReason::kCancelled);
  EXPECT_EQ(end.usage.completion_tokens, 3);
  EXPECT_EQ(end.usage.prompt_tokens, before.prompt_tokens);
}

}  // namespace
}  // namespace vls
