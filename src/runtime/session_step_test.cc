// Session::RunStep (step.main): prefill chunks and decode runs of several sessions in one pass
// give what each gives in a pass of its own.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/batch_engine_test_util.h"
#include "runtime/session.h"

namespace vls {
namespace {

// Sessions in the states the step starts from: `dec` past a text prefill (decoding), `img` with
// the first 2 rows of a DeepStack image prompt in its cache, `txt` empty.
struct Trio {
  Session dec, img, txt;
  explicit Trio(const LoadedModel& lm) : dec(lm), img(lm), txt(lm) {}
};

void Prepare(Trio& t, const GenerationRequest& text, const GenerationRequest& image) {
  std::vector<float> logits;
  ASSERT_TRUE(t.dec.PrefillRange(text.prompt(), 0, text.positions.length, true, &logits).ok());
  ASSERT_TRUE(t.img.PrefillRange(image.prompt(), 0, 2, false, &logits).ok());
}

// The f32 path computes every row of a pass the same way whatever else the pass holds, so the
// combined step equals the separate passes bit for bit.
TEST(SessionStepTest, OnePassEqualsThePassesOfEachPart) {
  auto lm = LoadModel("session_step", 3, 32);
  ASSERT_TRUE(lm);
  const GenerationRequest text = Text({4, 9, 16, 25, 36}, -1, 4);
  const GenerationRequest image = Image(*lm, 1, true, 4);  // pads at rows 3..6, DeepStack
  const GenerationRequest other = Text({2, 3, 5, 7, 11, 13}, 2, 4);
  const int64_t S = image.positions.length;
  const size_t V = static_cast<size_t>(lm->config().vocab);

  Trio alone(*lm);
  Prepare(alone, text, image);
  std::vector<float> want_img, want_dec, skipped;
  ASSERT_TRUE(alone.img.PrefillRange(image.prompt(), 2, S, true, &want_img).ok());
  ASSERT_TRUE(alone.txt.PrefillRange(other.prompt(), 0, 3, false, &skipped).ok());
  ASSERT_TRUE(alone.dec.Decode(101, &want_dec).ok());

  Trio both(*lm);
  Prepare(both, text, image);
  const PromptView iv = image.prompt(), ov = other.prompt();
  const StepPrefill parts[] = {{&both.img, &iv, 2, S, true}, {&both.txt, &ov, 0, 3, false}};
  Session* decodes[] = {&both.dec};
  const int32_t tokens[] = {101};
  const int32_t counts[] = {1};
  std::vector<float> got;
  const Status st = Session::RunStep(parts, decodes, tokens, counts, &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(got.size(), 2 * V);  // the image's last row, then the decode row
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + V), want_img);
  EXPECT_EQ(std::vector<float>(got.begin() + V, got.end()), want_dec);
  EXPECT_EQ(both.img.length(), S);
  EXPECT_EQ(both.img.rope_delta(), image.rope_delta);
  EXPECT_EQ(both.txt.length(), 0);  // its prompt is not complete
  EXPECT_EQ(both.txt.valid_rows(), 3);
  EXPECT_EQ(both.dec.length(), alone.dec.length());

  // The sessions go on as the ones that ran alone: their caches, lengths and deltas agree.
  std::vector<float> a, b;
  ASSERT_TRUE(alone.txt.PrefillRange(other.prompt(), 3, 6, true, &a).ok());
  ASSERT_TRUE(both.txt.PrefillRange(other.prompt(), 3, 6, true, &b).ok());
  EXPECT_EQ(a, b);
  Session* trio_alone[] = {&alone.dec, &alone.img, &alone.txt};
  Session* trio_both[] = {&both.dec, &both.img, &both.txt};
  const int32_t next[] = {7, 8, 9};
  ASSERT_TRUE(Session::DecodeBatch(trio_alone, next, &a).ok());
  ASSERT_TRUE(Session::DecodeBatch(trio_both, next, &b).ok());
  EXPECT_EQ(a, b);
}

TEST(SessionStepTest, ABadPartChangesNoDecodeSession) {
  auto lm = LoadModel("session_step_bad", 3, 32);
  ASSERT_TRUE(lm);
  const GenerationRequest text = Text({4, 9, 16, 25, 36}, 0, 4);
  const GenerationRequest image = Image(*lm, 1, true, 4);
  Trio t(*lm);
  Prepare(t, text, image);
  const PromptView iv = image.prompt();
  Session* decodes[] = {&t.dec};
  const int32_t tokens[] = {101};
  const int32_t counts[] = {1};
  std::vector<float> logits;
  // A chunk past the rows its cache holds.
  const StepPrefill gap[] = {{&t.img, &iv, 3, 5, false}};
  Status st = Session::RunStep(gap, decodes, tokens, counts, &logits);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  // A session both prefilled and decoded.
  const StepPrefill twice[] = {{&t.dec, &iv, 0, 2, false}};
  st = Session::RunStep(twice, decodes, tokens, counts, &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  // A token outside the vocabulary.
  const int32_t bad[] = {lm->config().vocab};
  const StepPrefill fine[] = {{&t.img, &iv, 2, 4, false}};
  st = Session::RunStep(fine, decodes, bad, counts, &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(t.dec.length(), 5);
  EXPECT_EQ(t.img.valid_rows(), 2);
  EXPECT_EQ(Session::RunStep({}, {}, {}, {}, &logits).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vls
