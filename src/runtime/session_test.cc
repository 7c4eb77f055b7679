#include "runtime/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "base/file.h"
#include "model/test_checkpoint.h"

namespace vls {
namespace {

std::unique_ptr<LoadedModel> LoadTiny(const std::string& name, TestModelSpec spec, int capacity) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = JoinPath(tmp ? tmp : "/tmp", "vls_session_test_" + name);
  Status s = WriteTestCheckpoint(dir, spec, false);
  EXPECT_TRUE(s.ok()) << s.ToString();
  LoadOptions o;
  o.capacity = capacity;
  auto m = LoadedModel::Load(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : nullptr;
}

float MaxAbsDiff(const float* a, const float* b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Decoding token j after a prefill must equal row S+j of one longer prefill (1-D and M-RoPE
// text, where positions are sequential and the delta is 0).
TEST(SessionTest, DecodeEqualsLongerPrefill) {
  for (const char* arch : {"qwen3", "qwen3-vl"}) {
    TestModelSpec spec;
    spec.arch = arch;
    spec.deepstack = 0;
    spec.dtype = DType::kF32;
    auto model = LoadTiny(arch, spec, 16);
    ASSERT_TRUE(model);
    const PositionMode mode = model->config().position_mode;
    const std::vector<int32_t> all = {3, 17, 42, 9, 250, 77, 5};
    const int S = 4;
    Session longer(*model);
    std::vector<float> ref;
    PrefillOptions every;
    every.all_logits = true;
    ASSERT_TRUE(longer.PrefillTokens(all, SequentialPositions(mode, 7), 0, every, &ref).ok());
    Session s(*model);
    std::vector<float> logits;
    ASSERT_TRUE(
        s.PrefillTokens(std::span(all).first(S), SequentialPositions(mode, S), 0, {}, &logits)
            .ok());
    const size_t V = static_cast<size_t>(model->config().vocab);
    EXPECT_LT(MaxAbsDiff(logits.data(), ref.data() + (S - 1) * V, V), 1e-4f) << arch;
    for (int j = S; j < 7; ++j) {
      ASSERT_TRUE(s.Decode(all[static_cast<size_t>(j)], &logits).ok());
      EXPECT_LT(MaxAbsDiff(logits.data(), ref.data() + static_cast<size_t>(j) * V, V), 1e-4f)
          << arch << " row " << j;
    }
    EXPECT_EQ(s.length(), 7);
  }
}

// docs/contracts.md §3 pinned example: S=4, δ=−2 → first decode coordinate 2; a later failed
// prefill with δ=+5 leaves length, delta and the next decode result untouched.
TEST(SessionTest, DeltaIsCommittedOnlyWhenPrefillSucceeds) {
  TestModelSpec spec;
  spec.deepstack = 0;
  auto model = LoadTiny("delta", spec, 8);
  ASSERT_TRUE(model);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  Session a(*model), control(*model);
  std::vector<float> la, lc;
  ASSERT_TRUE(a.PrefillTokens(ids, SequentialPositions(PositionMode::kMrope, 4), -2, {}, &la).ok());
  ASSERT_TRUE(
      control.PrefillTokens(ids, SequentialPositions(PositionMode::kMrope, 4), -2, {}, &lc).ok());
  EXPECT_EQ(DecodeCoordinate(a.length(), a.rope_delta()).value(), (RopeCoord{2, 2, 2}));
  // Fails validation: a token outside the vocabulary, then a wrong position mode.
  const std::vector<int32_t> bad = {1, 2, 99999, 4};
  EXPECT_FALSE(a.PrefillTokens(bad, SequentialPositions(PositionMode::kMrope, 4), 5, {}, &la).ok());
  EXPECT_FALSE(a.PrefillTokens(ids, SequentialPositions(PositionMode::k1D, 4), 5, {}, &la).ok());
  EXPECT_EQ(a.rope_delta(), -2);
  EXPECT_EQ(a.length(), 4);
  EXPECT_EQ(DecodeCoordinate(a.length(), a.rope_delta()).value(), (RopeCoord{2, 2, 2}));
  ASSERT_TRUE(a.Decode(7, &la).ok());
  ASSERT_TRUE(control.Decode(7, &lc).ok());
  EXPECT_EQ(la, lc);
}

TEST(SessionTest, RejectsBadRequestsWithNamedErrors) {
  TestModelSpec spec;
  spec.deepstack = 0;
  auto model = LoadTiny("bad", spec, 4);
  ASSERT_TRUE(model);
  Session s(*model);
  std::vector<float> l;
  EXPECT_FALSE(s.Decode(1, &l).ok());  // no prefill yet
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  Status too_long = s.PrefillTokens(five, SequentialPositions(PositionMode::kMrope, 5), 0, {}, &l);
  EXPECT_EQ(too_long.code(), StatusCode::kOutOfRange);
  std::vector<float> emb(2 * static_cast<size_t>(model->config().hidden), 0.5f);
  emb[3] = NAN;
  Status nan = s.PrefillEmbeddings(emb, SequentialPositions(PositionMode::kMrope, 2), 0, {}, &l);
  EXPECT_NE(nan.message().find("not finite"), std::string::npos);
  const std::vector<int32_t> one = {1};
  Status neg = s.PrefillTokens(one, SequentialPositions(PositionMode::kMrope, 1), -5, {}, &l);
  EXPECT_NE(neg.message().find("negative"), std::string::npos) << neg.message();
  ASSERT_TRUE(s.PrefillTokens(std::span(five).first(4),
                              SequentialPositions(PositionMode::kMrope, 4), 0, {}, &l)
                  .ok());
  EXPECT_EQ(s.Decode(1, &l).code(), StatusCode::kOutOfRange);  // at capacity
}

}  // namespace
}  // namespace vls
