// The batch engine on a mixture-of-experts model (issue 32 item 6): a tiny qwen3-vl-moe (fused
// experts, dense and sparse layers mixed, DeepStack, untied head) through everything the engine
// does for a dense model. Continuous batching, chunked prefill, prefix reuse and speculative
// verify passes put rows of different requests (and drafted rows) into one pass; each row routes
// on its own hidden state, so every stream must equal the request run alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "base/file.h"
#include "model/test_checkpoint.h"
#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"
#include "runtime/chat_pipeline.h"
#include "runtime/image_encoder.h"
#include "runtime/media_source.h"
#include "runtime/pipeline_test_util.h"
#include "runtime/spec_test_util.h"

namespace vls {
namespace {

constexpr int kVocab = 512;

// 3 layers: 0 and 2 sparse (8 experts, top-2, renormalised as qwen3_vl_moe always is), 1 dense.
TestModelSpec MoeSpec(uint64_t seed) {
  TestModelSpec spec;
  spec.arch = "qwen3-vl-moe";
  spec.vocab = kVocab;
  spec.deepstack = 2;
  spec.tied = false;
  spec.dtype = DType::kF32;
  spec.seed = seed;
  spec.experts = 8;
  spec.top_k = 2;
  spec.moe_intermediate = 48;
  spec.mlp_only_layers = {1};
  return spec;
}

std::unique_ptr<LoadedModel> LoadMoe(const std::string& name, int slots, int capacity = 64) {
  return LoadSpecCheckpoint("moe_" + name, MoeSpec(11), slots, capacity);
}

// Records which experts each row of each sparse layer chose.
class RoutingRecorder : public LayerHook {
 public:
  void AfterLayer(int, float*, int64_t) override {}
  void OnRouting(int layer, int64_t row0, const int32_t* experts, const float*, int64_t n,
                 int k) override {
    for (int64_t r = 0; r < n; ++r) {
      chosen[layer][row0 + r] = std::vector<int32_t>(experts + r * k, experts + (r + 1) * k);
    }
  }
  std::map<int, std::map<int64_t, std::vector<int32_t>>> chosen;
};

using Stream = EngineStream;

void ExpectSame(const Stream& got, const Stream& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t t = 0; t < got.logprobs.size(); ++t) {
    // f32 rows are computed alike whatever else the pass holds, up to the summation order of
    // attention tiles and grouped expert blocks.
    EXPECT_NEAR(got.logprobs[t], want.logprobs[t], 1e-4) << what << " token " << t;
  }
}

// The prepared chat's request as a plain GenerationRequest (PreparedChat::request is either, as
// the request path moves to ValidatedRequest).
template <typename R>
GenerationRequest Plain(R&& r) {
  if constexpr (std::is_same_v<std::decay_t<R>, GenerationRequest>) {
    return std::forward<R>(r);
  } else {
    return std::move(r).Release();
  }
}

std::vector<GenerationRequest> Requests(const LoadedModel& lm) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(Text({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0, 6));
  reqs.push_back(Image(lm, 1, true, 5));  // DeepStack at the 4 pads
  reqs.push_back(Text({9, 8, 7, 6, 5}, -2, 7));
  reqs.push_back(Image(lm, 2, false, 4));  // visual rows without DeepStack
  reqs.push_back(Text({42, 42, 42, 42, 17, 3}, 3, 6));
  return reqs;
}

TEST(MoeBatchEngineTest, TheRoutingIsNotDegenerate) {
  auto lm = LoadMoe("routing", 1);
  ASSERT_TRUE(lm);
  ASSERT_TRUE(lm->config().moe.has_value());
  EXPECT_TRUE(lm->config().IsSparseLayer(0));
  EXPECT_FALSE(lm->config().IsSparseLayer(1));
  EXPECT_TRUE(lm->config().IsSparseLayer(2));
  Session s(*lm);
  RoutingRecorder rec;
  PrefillOptions po;
  po.observer = &rec;
  std::vector<float> logits;
  const GenerationRequest r = Text({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 0, 1);
  ASSERT_TRUE(s.PrefillTokens(r.tokens, r.positions, r.rope_delta, po, &logits).ok());
  ASSERT_EQ(rec.chosen.size(), 2u);  // the two sparse layers, not the dense one
  for (const auto& [layer, rows] : rec.chosen) {
    EXPECT_EQ(rows.size(), r.tokens.size()) << "layer " << layer;
    std::set<std::vector<int32_t>> distinct;
    std::set<int32_t> used;
    for (const auto& [row, experts] : rows) {
      distinct.insert(experts);
      used.insert(experts.begin(), experts.end());
    }
    // 16 rows spread over several pairs and most of the 8 experts.
    EXPECT_GE(distinct.size(), 5u) << "layer " << layer;
    EXPECT_GE(used.size(), 6u) << "layer " << layer;
  }
}

// Several requests decoding together (continuous batching, text and images, DeepStack) give each
// request's stream alone, and the greedy tokens of a single session.
TEST(MoeBatchEngineTest, ABatchEqualsEachRequestAlone) {
  auto lm = LoadMoe("batch", 3);
  ASSERT_TRUE(lm);
  const std::vector<GenerationRequest> reqs = Requests(*lm);
  EngineOptions o;
  o.prefix_reuse = false;
  const std::vector<Stream> all = RunStreams(*lm, reqs, o);
  ASSERT_EQ(all.size(), reqs.size());
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<Stream> one = RunStreams(*lm, {reqs[i]}, o);
    ExpectSame(all[i], one[0], "request " + std::to_string(i));
    EXPECT_EQ(all[i].tokens, GreedyAlone(*lm, reqs[i])) << "request " << i;
    distinct.insert(all[i].tokens);
  }
  EXPECT_GE(distinct.size(), 3u) << "the model should answer different prompts differently";
}

// Any prefill chunk, including chunk boundaries inside the image's pads and DeepStack rows,
// gives the unchunked streams.
TEST(MoeBatchEngineTest, ChunkedPrefillEqualsTheWholePrefill) {
  auto lm = LoadMoe("chunks", 2);
  ASSERT_TRUE(lm);
  const std::vector<GenerationRequest> reqs = Requests(*lm);
  EngineOptions whole;
  whole.prefill_chunk = 0;
  whole.prefix_reuse = false;
  const std::vector<Stream> want = RunStreams(*lm, reqs, whole);
  for (int chunk : {1, 3, 5}) {
    EngineOptions o = whole;
    o.prefill_chunk = chunk;
    const std::vector<Stream> got = RunStreams(*lm, reqs, o);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ExpectSame(got[i], want[i],
                 "chunk " + std::to_string(chunk) + " request " + std::to_string(i));
    }
  }
}

// A second turn reuses the slot's rows of the first and gives the stream of a fresh prefill.
TEST(MoeBatchEngineTest, PrefixReuseEqualsAFreshPrefill) {
  auto lm = LoadMoe("reuse", 1);
  ASSERT_TRUE(lm);
  const std::vector<int32_t> turn1 = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  const GenerationRequest r1 = Text(turn1, 0, 4);
  const std::vector<int32_t> gen1 = GreedyAlone(*lm, r1);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), gen1.begin(), gen1.end());
  for (int32_t t : {21, 22, 23}) turn2.push_back(t);
  const GenerationRequest r2 = Text(turn2, 0, 5);
  for (int chunk : {0, 4}) {
    EngineOptions reuse;
    reuse.prefill_chunk = chunk;
    EngineOptions none = reuse;
    none.prefix_reuse = false;
    const std::vector<Stream> with = RunStreams(*lm, {r1, r2}, reuse);
    const std::vector<Stream> without = RunStreams(*lm, {r1, r2}, none);
    ExpectSame(with[1], without[1], "reuse chunk " + std::to_string(chunk));
    EXPECT_EQ(with[1].tokens, GreedyAlone(*lm, r2));
    EXPECT_EQ(with[1].cached, static_cast<int32_t>(turn1.size() + 3));
    EXPECT_EQ(without[1].cached, 0);
  }
}

// Speculative decoding: the drafted rows of a verify pass route independently, so greedy tokens
// equal plain decoding, with prompt-lookup drafts and with the model as its own draft (whose
// drafts are then all accepted).
TEST(MoeBatchEngineTest, SpeculativeDecodingGivesThePlainGreedyTokens) {
  auto lm = LoadMoe("spec", 4);
  ASSERT_TRUE(lm);
  std::vector<GenerationRequest> reqs = {
      Text({1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, 0, 16), Text({9, 8, 7}, -2, 16),
      Text({5, 6, 7, 8, 9, 10, 11}, 3, 16), Text({42, 42, 42, 42}, 0, 16)};
  std::vector<std::vector<int32_t>> plain;
  for (const GenerationRequest& r : reqs) plain.push_back(GreedyAlone(*lm, r));
  EngineOptions ngram;
  ngram.speculative = Spec(4);
  const Result a = RunAll(*lm, reqs, ngram);
  EngineOptions self;
  self.speculative = Spec(4, DraftSource::kModel);
  self.draft_model = lm.get();
  const Result b = RunAll(*lm, reqs, self);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(a.by_id.at(a.ids[i]).tokens, plain[i]) << "n-gram, request " << i;
    EXPECT_EQ(b.by_id.at(b.ids[i]).tokens, plain[i]) << "self draft, request " << i;
  }
  EXPECT_GT(b.counters.verify_passes, 0u);
  EXPECT_GT(b.counters.draft_tokens, 0u);
  EXPECT_EQ(b.counters.accepted_draft_tokens, b.counters.draft_tokens);
  EXPECT_EQ(b.counters.generated_tokens, 4u * 16u);
}

// An image question through the chat pipeline (encoder, DeepStack payload) on a qwen3-vl-moe
// with a vision tower: the engine's stream equals the same prepared request through a single
// session's DeepStack prefill and decode entries.
TEST(MoeBatchEngineTest, AnImageChatThroughThePipelineEqualsThePlainEntries) {
  const std::string dir = JoinPath("/tmp", "vls_moe_image_pipeline_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteTestCheckpoint(dir, MoeSpec(13), false).ok());
  ASSERT_TRUE(
      WriteStringToFile(JoinPath(dir, "tokenizer.json"), testing::TinyChatTokenizerJson(kVocab))
          .ok());
  static constexpr const char* kTemplate =
      "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
      "{%- if m.content is string %}{{ m.content }}{%- else %}{%- for c in m.content %}"
      "{%- if c.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
      "{%- elif 'text' in c %}{{ c.text }}{%- endif %}{%- endfor %}{%- endif %}"
      "{{ '<|im_end|>\\n' }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";
  const nlohmann::json tc = {{"eos_token", "<|im_end|>"}, {"chat_template", kTemplate}};
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "tokenizer_config.json"), tc.dump()).ok());
  LoadOptions lo;
  lo.capacity = 512;
  lo.slots = 2;
  lo.threads = 2;
  auto lm = LoadedModel::Load(dir, lo);
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  auto enc = ImageEncoder::Load(dir, **lm, ImageEncoderOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  ChatPipelineOptions po;
  po.images = enc->get();
  auto pipeline = ChatPipeline::Load(dir, **lm, po);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().ToString();

  const std::string png =
      ReadFileToString(VLS_SOURCE_DIR "/tests/image/fixtures/png_rgb.png").value();
  const std::string url = "data:image/png;base64," +
                          EncodeBase64({reinterpret_cast<const uint8_t*>(png.data()), png.size()});
  ChatRequest chat;
  chat.messages = nlohmann::ordered_json::array(
      {{{"role", "user"},
        {"content",
         {{{"type", "image"}, {"image", url}}, {{"type", "text"}, {"text", "what is it?"}}}}}});
  auto prepared = (*pipeline)->Prepare(chat);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  GenerationRequest r = Plain(std::move(prepared->request));
  ASSERT_TRUE(r.deepstack.has_value());
  EXPECT_EQ(r.deepstack->num_layers(), 2);
  r.max_new_tokens = 6;
  r.ignore_eos = true;
  const std::vector<int32_t> want = GreedyAlone(**lm, r);
  // Beside a text request, chunked across the image, and whole.
  for (int chunk : {0, 3}) {
    EngineOptions o;
    o.prefill_chunk = chunk;
    o.prefix_reuse = false;
    const std::vector<Stream> got = RunStreams(**lm, {r, Text({5, 6, 7, 8}, 0, 6)}, o);
    EXPECT_EQ(got[0].tokens, want) << "chunk " << chunk;
    EXPECT_EQ(got[1].tokens, GreedyAlone(**lm, Text({5, 6, 7, 8}, 0, 6))) << "chunk " << chunk;
  }
  pipeline->reset();
  enc->reset();
  lm->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vls
