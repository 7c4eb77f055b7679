#include "runtime/deepstack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "base/file.h"
#include "io/safetensors.h"
#include "model/test_checkpoint.h"
#include "runtime/session.h"

namespace vls {
namespace {

std::string TmpDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return JoinPath(tmp ? tmp : "/tmp", "vls_deepstack_test_" + name);
}

TensorView View(const HostTensor& t) { return t.view(); }

// A K=3, Nv=2, H=2 payload with distinct values.
struct Parts {
  HostTensor pos = HostTensor::FromI32({2}, std::vector<int32_t>{1, 3});
  HostTensor feat =
      HostTensor::FromF32({3, 2, 2}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  HostTensor layers = HostTensor::FromI32({3}, std::vector<int32_t>{0, 2, 3});
  StatusOr<DeepStackPayload> Make() const {
    return DeepStackPayload::Create(View(pos), View(feat), View(layers));
  }
};

void ExpectRule(const Status& s, DeepStackRule rule) {
  ASSERT_FALSE(s.ok()) << "expected rule " << DeepStackRuleName(rule);
  auto got = DeepStackRuleOf(s);
  ASSERT_TRUE(got.has_value()) << s.message();
  EXPECT_EQ(*got, rule) << s.message();
}

TEST(DeepStackPayloadTest, CompactRoundTrip) {
  Parts p;
  auto d = p.Make();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_visual(), 2);
  EXPECT_EQ(d->num_layers(), 3);
  EXPECT_EQ(d->hidden(), 2);
  EXPECT_EQ(std::vector<int32_t>(d->positions().begin(), d->positions().end()),
            (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(std::vector<int32_t>(d->layer_indices().begin(), d->layer_indices().end()),
            (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(d->features(1)[0], 5.0f);
  EXPECT_EQ(d->features(2)[3], 12.0f);
  // The payload owns copies: changing the caller's buffers afterwards changes nothing.
  p.feat.f32()[4] = -1;
  EXPECT_EQ(d->features(1)[0], 5.0f);
  EXPECT_EQ(d->bytes(), 8u + 48u + 12u);
}

TEST(DeepStackPayloadTest, ZeroVisualPositionsIsValid) {
  HostTensor pos(DType::kI32, {0}), feat(DType::kF32, {2, 0, 4}),
      layers = HostTensor::FromI32({2}, std::vector<int32_t>{0, 1});
  auto d = DeepStackPayload::Create(View(pos), View(feat), View(layers));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  DeepStackRequestFacts f;
  f.sequence_length = 3;
  EXPECT_TRUE(ValidateDeepStackRequest(*d, f).ok());
}

TEST(DeepStackPayloadTest, Layer1RejectsTypeShapeAndBytes) {
  Parts p;
  HostTensor f32pos = HostTensor::FromF32({2}, std::vector<float>{1, 3});
  ExpectRule(DeepStackPayload::Create(View(f32pos), View(p.feat), View(p.layers)).status(),
             DeepStackRule::kDType);
  HostTensor i32feat(DType::kI32, {3, 2, 2});
  ExpectRule(DeepStackPayload::Create(View(p.pos), View(i32feat), View(p.layers)).status(),
             DeepStackRule::kDType);
  HostTensor rank2(DType::kI32, {1, 2});
  ExpectRule(DeepStackPayload::Create(View(rank2), View(p.feat), View(p.layers)).status(),
             DeepStackRule::kRank);
  HostTensor empty_layers(DType::kI32, {0}), feat0(DType::kF32, {0, 2, 2});
  ExpectRule(DeepStackPayload::Create(View(p.pos), View(feat0), View(empty_layers)).status(),
             DeepStackRule::kEmptyLayerSet);
  HostTensor wrong_nv(DType::kF32, {3, 1, 2});
  ExpectRule(DeepStackPayload::Create(View(p.pos), View(wrong_nv), View(p.layers)).status(),
             DeepStackRule::kShape);
  TensorView truncated = View(p.feat);
  truncated.nbytes -= 1;
  Status s = DeepStackPayload::Create(View(p.pos), truncated, View(p.layers)).status();
  ExpectRule(s, DeepStackRule::kByteCount);
  EXPECT_NE(s.message().find("layer_features"), std::string::npos);
  TensorView huge = View(p.feat);
  huge.shape = {3, 2, int64_t{1} << 62};
  HostTensor pos_for_huge = HostTensor::FromI32({2}, std::vector<int32_t>{1, 3});
  ExpectRule(DeepStackPayload::Create(View(pos_for_huge), huge, View(p.layers)).status(),
             DeepStackRule::kByteCount);
}

TEST(DeepStackPayloadTest, Layer2RejectsRequestSemantics) {
  DeepStackRequestFacts f;
  f.sequence_length = 4;
  auto with_pos = [](std::vector<int32_t> v) {
    Parts p;
    p.pos = HostTensor::FromI32({static_cast<int64_t>(v.size())}, v);
    p.feat = HostTensor(DType::kF32, {3, static_cast<int64_t>(v.size()), 2});
    return p.Make().value();
  };
  ExpectRule(ValidateDeepStackRequest(with_pos({1, 1}), f), DeepStackRule::kPositionsNotSorted);
  ExpectRule(ValidateDeepStackRequest(with_pos({3, 1}), f), DeepStackRule::kPositionsNotSorted);
  // Sortedness is checked before range: [5, 4] is unsorted, not out of range.
  ExpectRule(ValidateDeepStackRequest(with_pos({5, 4}), f), DeepStackRule::kPositionsNotSorted);
  ExpectRule(ValidateDeepStackRequest(with_pos({1, 4}), f), DeepStackRule::kPositionOutOfRange);
  ExpectRule(ValidateDeepStackRequest(with_pos({-1, 2}), f), DeepStackRule::kPositionOutOfRange);
  const std::vector<int32_t> ids = {7, 9, 7, 9};  // pad token 9 at 1 and 3
  DeepStackRequestFacts with_ids = f;
  with_ids.token_ids = ids;
  with_ids.image_token_id = 9;
  EXPECT_TRUE(ValidateDeepStackRequest(with_pos({1, 3}), with_ids).ok());
  ExpectRule(ValidateDeepStackRequest(with_pos({1, 2}), with_ids),
             DeepStackRule::kVisualCountMismatch);
  ExpectRule(ValidateDeepStackRequest(with_pos({1}), with_ids),
             DeepStackRule::kVisualCountMismatch);
  DeepStackRequestFacts declared = f;
  declared.declared_visual_tokens = 3;
  ExpectRule(ValidateDeepStackRequest(with_pos({1, 3}), declared),
             DeepStackRule::kVisualCountMismatch);
  Parts neg;
  neg.layers = HostTensor::FromI32({3}, std::vector<int32_t>{0, -1, 3});
  ExpectRule(ValidateDeepStackRequest(neg.Make().value(), f), DeepStackRule::kNegativeLayer);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    Parts nf;
    nf.feat.f32()[7] = bad;
    Status s = ValidateDeepStackRequest(nf.Make().value(), f);
    ExpectRule(s, DeepStackRule::kNonFiniteFeature);
    EXPECT_NE(s.message().find("layer_features[1,1,1]"), std::string::npos) << s.message();
  }
}

TEST(DeepStackPayloadTest, Layer3RejectsModelMismatches) {
  Qwen3Config cfg;
  cfg.hidden = 2;
  cfg.position_mode = PositionMode::kMrope;
  auto d = Parts().Make().value();
  ExpectRule(ValidateDeepStackForModel(d, cfg, 8, PositionMode::kMrope),
             DeepStackRule::kNotDeclared);
  cfg.deepstack = DeepStackConfig{{0, 2, 3}, 8, true};
  EXPECT_TRUE(ValidateDeepStackForModel(d, cfg, 8, PositionMode::kMrope).ok());
  ExpectRule(ValidateDeepStackForModel(d, cfg, 1, PositionMode::kMrope),
             DeepStackRule::kStaticMaxOverflow);
  ExpectRule(ValidateDeepStackForModel(d, cfg, 8, PositionMode::k1D), DeepStackRule::kPositionMode);
  Qwen3Config h3 = cfg;
  h3.hidden = 3;
  ExpectRule(ValidateDeepStackForModel(d, h3, 8, PositionMode::kMrope),
             DeepStackRule::kHiddenMismatch);
  Qwen3Config other = cfg;
  other.deepstack->target_layers = {0, 1, 2};
  Status s = ValidateDeepStackForModel(d, other, 8, PositionMode::kMrope);
  ExpectRule(s, DeepStackRule::kLayerContract);
  EXPECT_NE(s.message().find("[0,2,3]"), std::string::npos);
}

// Rewrites a generated checkpoint as identity-like layers: every projection zero, norms one.
Status MakeIdentityLike(const std::string& dir) {
  VLS_ASSIGN_OR_RETURN(auto ck, SafetensorsCheckpoint::Open(dir));
  std::vector<HostTensor> keep;
  std::vector<NamedTensor> out;
  const std::vector<std::string> names = ck->Names();
  keep.reserve(names.size());
  for (const std::string& n : names) {
    const auto* t = ck->Find(n);
    HostTensor h(DType::kF32, t->view.shape);
    const bool norm = n.find("norm.weight") != std::string::npos;
    for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = norm ? 1.0f : 0.0f;
    keep.push_back(std::move(h));
    out.push_back({n, keep.back().view()});
  }
  ck.reset();  // unmap before rewriting the file
  return WriteSafetensors(JoinPath(dir, "model.safetensors"), out);
}

// Records the residual the observer sees after each layer (after the DeepStack hook).
class Observer : public LayerHook {
 public:
  void AfterLayer(int, float* x, int64_t M) override { seen.emplace_back(x, x + M * 4); }
  std::vector<std::vector<float>> seen;
};

// docs/contracts.md §5: embeddings 1, positions 1..3, features 10 for layers 0,1,2 → visual rows
// read 11, 21, 31 after the hooks, other rows 1, K/V zero. Exact, in 1-D and M-RoPE, through the
// production entry and the diagnostics entry alike.
TEST(DeepStackFixtureTest, IdentityLayersGiveExactResiduals) {
  for (const char* arch : {"qwen3", "qwen3-vl"}) {
    TestModelSpec spec;
    spec.arch = arch;
    spec.hidden = 4, spec.layers = 3, spec.heads = 2, spec.kv_heads = 1, spec.head_dim = 4;
    spec.intermediate = 8, spec.vocab = 32, spec.deepstack = 0, spec.vision = false;
    spec.ds_layers = {0, 1, 2};
    spec.ds_nmax = 4;
    const std::string dir = TmpDir(std::string("fixture_") + arch);
    Status written = WriteTestCheckpoint(dir, spec, false);
    ASSERT_TRUE(written.ok()) << written.ToString();
    ASSERT_TRUE(MakeIdentityLike(dir).ok());
    LoadOptions o;
    o.capacity = 8;
    auto lm = LoadedModel::Load(dir, o);
    ASSERT_TRUE(lm.ok()) << lm.status().ToString();
    const PositionMode mode = (*lm)->config().position_mode;
    const int S = 5, H = 4;
    std::vector<float> emb(S * H, 1.0f);
    HostTensor pos = HostTensor::FromI32({3}, std::vector<int32_t>{1, 2, 3});
    HostTensor feat(DType::kF32, {3, 3, H});
    for (int64_t i = 0; i < feat.numel(); ++i) feat.f32()[i] = 10.0f;
    HostTensor layers = HostTensor::FromI32({3}, std::vector<int32_t>{0, 1, 2});
    auto payload = DeepStackPayload::Create(pos.view(), feat.view(), layers.view());
    ASSERT_TRUE(payload.ok());
    for (bool diag : {false, true}) {
      Session s(**lm);
      Observer obs;
      std::vector<std::vector<float>> states;
      PrefillOptions opts;
      opts.observer = &obs;
      opts.hidden_states = diag ? &states : nullptr;
      std::vector<float> logits;
      Status st =
          s.PrefillDeepStack(emb, SequentialPositions(mode, S), 0, *payload, {}, opts, &logits);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(obs.seen.size(), 3u);
      if (diag) {
        ASSERT_EQ(states.size(), 3u);
        EXPECT_EQ(states, obs.seen);
      }
      for (int l = 0; l < 3; ++l) {
        for (int r = 0; r < S; ++r) {
          const float want = (r >= 1 && r <= 3) ? 1.0f + 10.0f * static_cast<float>(l + 1) : 1.0f;
          for (int h = 0; h < H; ++h) {
            EXPECT_EQ(obs.seen[l][r * H + h], want)
                << arch << " diag=" << diag << " layer " << l << " row " << r;
          }
        }
      }
      for (int l = 0; l < 3; ++l) {
        for (int r = 0; r < S; ++r) {
          for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(s.cache().k_head(l, 0)[r * s.cache().head_dim() + i], 0.0f);
            EXPECT_EQ(s.cache().v_head(l, 0)[r * s.cache().head_dim() + i], 0.0f);
          }
        }
      }
    }
  }
}

TEST(DeepStackSessionTest, RejectedPrefillChangesNoState) {
  TestModelSpec spec;
  spec.deepstack = 2;
  const std::string dir = TmpDir("state");
  ASSERT_TRUE(WriteTestCheckpoint(dir, spec, false).ok());
  LoadOptions o;
  o.capacity = 16;
  auto lm = LoadedModel::Load(dir, o);
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  const int H = (*lm)->config().hidden;
  Session a(**lm), control(**lm);
  std::vector<float> emb(4 * H, 0.25f), la, lc;
  HostTensor pos = HostTensor::FromI32({2}, std::vector<int32_t>{1, 2});
  HostTensor feat(DType::kF32, {2, 2, H});
  HostTensor good = HostTensor::FromI32({2}, std::vector<int32_t>{0, 1});
  HostTensor wrong = HostTensor::FromI32({2}, std::vector<int32_t>{0, 2});
  auto ok_payload = DeepStackPayload::Create(pos.view(), feat.view(), good.view()).value();
  auto bad_payload = DeepStackPayload::Create(pos.view(), feat.view(), wrong.view()).value();
  const PositionIds p4 = SequentialPositions(PositionMode::kMrope, 4);
  ASSERT_TRUE(a.PrefillDeepStack(emb, p4, -1, ok_payload, {}, {}, &la).ok());
  ASSERT_TRUE(control.PrefillDeepStack(emb, p4, -1, ok_payload, {}, {}, &lc).ok());
  Status s = a.PrefillDeepStack(emb, p4, 5, bad_payload, {}, {}, &la);
  ExpectRule(s, DeepStackRule::kLayerContract);
  ExpectRule(a.PrefillDeepStack(emb, SequentialPositions(PositionMode::k1D, 4), 5, ok_payload, {},
                                {}, &la),
             DeepStackRule::kPositionMode);
  EXPECT_EQ(a.length(), 4);
  EXPECT_EQ(a.rope_delta(), -1);
  ASSERT_TRUE(a.Decode(3, &la).ok());
  ASSERT_TRUE(control.Decode(3, &lc).ok());
  EXPECT_EQ(la, lc);
}

}  // namespace
}  // namespace vls
