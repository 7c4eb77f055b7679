// Non-finite logits (issue 31): a model with a NaN weight, loaded without the weight check,
// ends only the requests whose logits go non-finite, each with an error naming the generation
// step, while the other requests of the same batch finish with their normal tokens. The NaN
// sits in one embedding row, so exactly the sequences that contain that token are poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <vector>

#include "base/scratch_test_util.h"
#include "runtime/batch_engine_test_util.h"

namespace vls {
namespace {

TestModelSpec Spec() {
  TestModelSpec spec;  // LoadModel's untied F32 model
  spec.deepstack = 2;
  spec.tied = false;
  spec.dtype = DType::kF32;
  spec.seed = 5;
  return spec;
}

bool Contains(const std::vector<int32_t>& v, int32_t t) {
  return std::find(v.begin(), v.end(), t) != v.end();
}

TEST(BatchEngineNonFiniteTest, OnlyTheRequestsWithNonFiniteLogitsFailNamingTheStep) {
  constexpr int kMaxNew = 10;
  auto clean = LoadModel("nonfinite_clean", 1);
  ASSERT_NE(clean, nullptr);
  // Request B: a prompt whose greedy continuation soon repeats a token of its history, so prompt
  // lookup drafts for it (the verify pass samples through Verify). The poisoned token: one that
  // B generates at index k > that point (not in its history before), so B's logits turn
  // non-finite right after it is fed back, at step k + 2.
  GenerationRequest b;
  std::vector<int32_t> b_clean;
  int k = 0;
  for (int32_t s = 1; s < 400 && k == 0; s += 7) {
    b = Text({s, s + 1, s + 2, s + 3, s, s + 1}, 0, kMaxNew);
    b_clean = GreedyAlone(*clean, b);
    std::vector<int32_t> seen = b.tokens;
    bool drafts = false;
    for (int i = 0; i + 2 <= kMaxNew; ++i) {
      const int32_t t = b_clean[static_cast<size_t>(i)];
      if (Contains(seen, t)) {
        drafts = true;  // the suffix [t] matches earlier in the history
      } else if (drafts) {
        k = i;
        break;
      }
      seen.push_back(t);
    }
  }
  ASSERT_GT(k, 0) << "no prompt found whose continuation drafts before a new token";
  const int32_t poison = b_clean[static_cast<size_t>(k)];
  // Request C never meets the poisoned token, clean.
  GenerationRequest c;
  std::vector<int32_t> c_clean;
  for (int32_t first = 20; first < 200; first += 10) {
    c = Text({first, first + 1, first + 2, first + 3}, 0, kMaxNew);
    c_clean = GreedyAlone(*clean, c);
    if (!Contains(c.tokens, poison) && !Contains(c_clean, poison)) break;
    c_clean.clear();
  }
  ASSERT_FALSE(c_clean.empty());
  const GenerationRequest a = Text({30, poison, 31}, 0, kMaxNew);  // poisoned in its prompt

  const std::string dir = test::ScratchPath("vls_batch_nonfinite_", "nan_row");
  ASSERT_TRUE(WriteTestCheckpoint(dir, Spec(), false).ok());
  const int64_t H = clean->config().hidden;
  ASSERT_TRUE(SetTestCheckpointElement(dir, "model.language_model.embed_tokens.weight",
                                       poison * H + 5, std::numeric_limits<float>::quiet_NaN())
                  .ok());
  LoadOptions o;
  o.capacity = 32;
  o.slots = 3;
  o.threads = 2;
  // A load that checks refuses it, naming the tensor and the element.
  o.check_weights = true;
  auto refused = LoadedModel::Load(dir, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("'model.language_model.embed_tokens.weight' has a NaN "
                                            "at element " +
                                            std::to_string(poison * H + 5)),
            std::string::npos)
      << refused.status().ToString();

  o.check_weights = false;
  auto lm = LoadedModel::Load(dir, o);
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  // Plainly and with prompt-lookup speculation (the verify pass samples the rows through
  // Verify): the same outcome.
  for (const int draft_tokens : {0, 4}) {
    SCOPED_TRACE("draft_tokens " + std::to_string(draft_tokens));
    EngineOptions eo;
    eo.speculative.draft_tokens = draft_tokens;
    std::map<uint64_t, std::vector<int32_t>> tokens;
    std::map<uint64_t, TokenEvent> last;
    BatchEngine e(
        **lm,
        [&](const TokenEvent& ev) {
          if (ev.token >= 0) tokens[ev.request_id].push_back(ev.token);
          if (ev.finish != FinishReason::kNone) last[ev.request_id] = ev;
          return true;
        },
        eo);
    const uint64_t ia = e.Submit(a).value(), ib = e.Submit(b).value(), ic = e.Submit(c).value();
    e.RunUntilIdle();

    ASSERT_EQ(last.count(ia), 1u);
    EXPECT_EQ(last[ia].finish, FinishReason::kError);
    EXPECT_NE(last[ia].error.find("the model produced non-finite logits (NaN or infinity) at "
                                  "generation step 1 (prompt of 3 tokens)"),
              std::string::npos)
        << last[ia].error;
    EXPECT_TRUE(tokens[ia].empty());

    ASSERT_EQ(last.count(ib), 1u);
    EXPECT_EQ(last[ib].finish, FinishReason::kError);
    EXPECT_NE(last[ib].error.find("at generation step " + std::to_string(k + 2) + " (prompt of " +
                                  std::to_string(b.tokens.size()) + " tokens)"),
              std::string::npos)
        << last[ib].error;
    EXPECT_EQ(tokens[ib], std::vector<int32_t>(b_clean.begin(), b_clean.begin() + k + 1));

    ASSERT_EQ(last.count(ic), 1u);
    EXPECT_EQ(last[ic].finish, FinishReason::kLength);
    EXPECT_EQ(tokens[ic], c_clean);
    EXPECT_TRUE(e.Idle());
    if (draft_tokens > 0) {
      EXPECT_GT(e.counters().verify_passes, 0u);
    }
  }
}

}  // namespace
}  // namespace vls
