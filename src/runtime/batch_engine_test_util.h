// Shared fixtures of the batch engine tests: tiny untied test models, text and image requests,
// and the single-session greedy reference.
#ifndef VLSTACK_RUNTIME_BATCH_ENGINE_TEST_UTIL_H_
#define VLSTACK_RUNTIME_BATCH_ENGINE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "model/test_checkpoint.h"
#include "runtime/batch_engine.h"

namespace vls {

// A tiny test checkpoint written from `spec` under TEST_TMPDIR/vls_batch_test_<name>, loaded
// for `slots` slots of `capacity` rows with two threads (the parallel paths, whatever the
// machine).
inline std::unique_ptr<LoadedModel> LoadSpecCheckpoint(
    const std::string& name, const TestModelSpec& spec, int slots, int capacity,
    kernels::Precision precision = kernels::Precision::kF32) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = JoinPath(tmp ? tmp : "/tmp", "vls_batch_test_" + name);
  Status s = WriteTestCheckpoint(dir, spec, false);
  EXPECT_TRUE(s.ok()) << s.ToString();
  LoadOptions o;
  o.capacity = capacity;
  o.slots = slots;
  o.precision = precision;
  o.threads = 2;
  auto lm = LoadedModel::Load(dir, o);
  EXPECT_TRUE(lm.ok()) << lm.status().ToString();
  return lm.ok() ? std::move(*lm) : nullptr;
}

// `tied`: tied tiny models tend to repeat their input token (speculation tests want that);
// untied ones vary.
inline std::unique_ptr<LoadedModel> LoadModel(
    const std::string& name, int slots, int capacity = 32,
    kernels::Precision precision = kernels::Precision::kF32, bool tied = false) {
  TestModelSpec spec;
  spec.deepstack = 2;
  spec.tied = tied;
  spec.dtype = DType::kF32;
  spec.seed = 5;
  return LoadSpecCheckpoint(name, spec, slots, capacity, precision);
}

inline GenerationRequest Text(std::vector<int32_t> ids, int32_t delta, int max_new) {
  GenerationRequest r;
  r.positions = SequentialPositions(PositionMode::kMrope, static_cast<int64_t>(ids.size()));
  r.tokens = std::move(ids);
  r.rope_delta = delta;
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

// An image prompt (grid [1,4,4] → 4 pad tokens) with random visual rows; DeepStack optional.
inline GenerationRequest Image(const LoadedModel& lm, int seed, bool deepstack, int max_new) {
  const Qwen3Config& c = lm.config();
  std::vector<int32_t> ids = {7, 11, c.vision_start_token_id};
  for (int i = 0; i < 4; ++i) ids.push_back(c.image_token_id);
  ids.push_back(c.vision_end_token_id);
  ids.push_back(13 + seed);
  const GridThw grid[] = {{1, 4, 4}};
  auto ri = GetRopeIndex(c, ids, grid, {});
  EXPECT_TRUE(ri.ok());
  GenerationRequest r;
  r.positions = ri->positions;
  r.rope_delta = ri->rope_delta;
  const int64_t H = c.hidden, S = static_cast<int64_t>(ids.size());
  r.embeddings.resize(static_cast<size_t>(S * H));
  lm.model().Embed(ids, r.embeddings.data());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> n;
  for (int64_t s = 3; s < 7; ++s) {
    for (int64_t h = 0; h < H; ++h) r.embeddings[static_cast<size_t>(s * H + h)] = n(rng);
  }
  if (deepstack) {
    HostTensor pos = HostTensor::FromI32({4}, std::vector<int32_t>{3, 4, 5, 6});
    HostTensor feat(DType::kF32, {2, 4, H});
    for (int64_t i = 0; i < feat.numel(); ++i) feat.f32()[i] = n(rng);
    HostTensor layers = HostTensor::FromI32({2}, std::vector<int32_t>{0, 1});
    r.deepstack = DeepStackPayload::Create(pos.view(), feat.view(), layers.view()).value();
  }
  r.tokens = ids;
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

// A longer image prompt: text, vision_start, a [1, 2·side, 2·side] grid (side² pads), vision_end,
// text; random visual rows and (optionally) DeepStack features of scale 2 at the pads.
inline GenerationRequest BigImage(const LoadedModel& lm, int seed, bool deepstack, int side,
                                  int max_new) {
  const Qwen3Config& c = lm.config();
  std::vector<int32_t> ids = {7, 11, 19, c.vision_start_token_id};
  const int first_pad = static_cast<int>(ids.size());
  for (int i = 0; i < side * side; ++i) ids.push_back(c.image_token_id);
  ids.push_back(c.vision_end_token_id);
  for (int i = 0; i < 5; ++i) ids.push_back(30 + 3 * i + seed);
  const GridThw grid[] = {{1, 2 * side, 2 * side}};
  auto ri = GetRopeIndex(c, ids, grid, {});
  EXPECT_TRUE(ri.ok()) << ri.status().ToString();
  GenerationRequest r;
  r.positions = ri->positions;
  r.rope_delta = ri->rope_delta;
  const int64_t H = c.hidden, S = static_cast<int64_t>(ids.size());
  r.embeddings.resize(static_cast<size_t>(S * H));
  lm.model().Embed(ids, r.embeddings.data());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> n;
  const int nv = side * side;
  for (int64_t s = first_pad; s < first_pad + nv; ++s) {
    for (int64_t h = 0; h < H; ++h) r.embeddings[static_cast<size_t>(s * H + h)] = n(rng);
  }
  if (deepstack) {
    std::vector<int32_t> pos(static_cast<size_t>(nv));
    for (int v = 0; v < nv; ++v) pos[static_cast<size_t>(v)] = first_pad + v;
    HostTensor p = HostTensor::FromI32({nv}, pos);
    HostTensor feat(DType::kF32, {2, nv, H});
    for (int64_t i = 0; i < feat.numel(); ++i) feat.f32()[i] = 2.0f * n(rng);
    HostTensor layers = HostTensor::FromI32({2}, std::vector<int32_t>{0, 1});
    r.deepstack = DeepStackPayload::Create(p.view(), feat.view(), layers.view()).value();
  }
  r.tokens = ids;
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

// The request's greedy tokens from a single session (prefill, then decode one at a time).
inline std::vector<int32_t> GreedyAlone(const LoadedModel& lm, const GenerationRequest& r) {
  Session s(lm);
  std::vector<float> logits;
  Status st;
  if (r.deepstack) {
    DeepStackRequestFacts f;
    f.token_ids = std::span<const int32_t>(r.tokens);
    f.image_token_id = lm.config().image_token_id;
    st = s.PrefillDeepStack(r.embeddings, r.positions, r.rope_delta, *r.deepstack, f, {}, &logits);
  } else if (!r.embeddings.empty()) {
    st = s.PrefillEmbeddings(r.embeddings, r.positions, r.rope_delta, {}, &logits);
  } else {
    st = s.PrefillTokens(r.tokens, r.positions, r.rope_delta, {}, &logits);
  }
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < r.max_new_tokens) {
    out.push_back(ArgMax(logits));
    if (static_cast<int>(out.size()) == r.max_new_tokens) break;
    EXPECT_TRUE(s.Decode(out.back(), &logits).ok());
  }
  return out;
}

// One request's stream from an engine run: its tokens with their log-probabilities, its
// finish reason and the cached-token count its events reported.
struct EngineStream {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
  int32_t cached = -1;
};

// Runs `reqs` through one engine with `options` (logprobs on, so each token's log-probability
// under the model is compared too) and returns each request's stream, in submission order.
inline std::vector<EngineStream> RunStreams(const LoadedModel& lm,
                                            std::vector<GenerationRequest> reqs,
                                            EngineOptions options) {
  std::map<uint64_t, EngineStream> got;
  BatchEngine e(
      lm,
      [&](const TokenEvent& ev) {
        EngineStream& s = got[ev.request_id];
        if (ev.token >= 0) {
          s.tokens.push_back(ev.token);
          s.logprobs.push_back(ev.logprob);
        }
        if (ev.finish != FinishReason::kNone) s.finish = ev.finish;
        s.cached = ev.cached_tokens;
        return true;
      },
      options);
  std::vector<uint64_t> ids;
  for (auto& r : reqs) {
    r.logprobs = 0;
    auto id = e.Submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(id.ok() ? *id : 0);
  }
  e.RunUntilIdle();
  std::vector<EngineStream> out;
  for (uint64_t id : ids) out.push_back(got[id]);
  return out;
}

}  // namespace vls

#endif  // VLSTACK_RUNTIME_BATCH_ENGINE_TEST_UTIL_H_
