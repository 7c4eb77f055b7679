// The sparse MLP of a mixture-of-experts model (ADR 0027) against a float64 reference, in every
// precision; the fused and per-expert layouts; chunked and batched passes; the routing hook;
// the prepared artifact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "base/scratch_test_util.h"
#include "kernels/moe.h"
#include "model/moe_mlp.h"
#include "model/moe_test_model.h"
#include "model/prepared_artifact.h"
#include "model/qwen3_model.h"

namespace vls {
namespace {

using test::MoeTestModel;
using test::MoeTestSpec;

std::string Dir(const std::string& name) { return test::ScratchPath("vls_moe_test_", name); }

ModelOptions Options(kernels::Precision p, const std::string& artifact = "") {
  ModelOptions o;
  o.threads = 2;
  o.precision = p;
  o.artifact = artifact;
  return o;
}

std::vector<int32_t> Tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// Records every OnRouting call: per layer, row -> (experts, weights).
class RoutingRecorder : public LayerHook {
 public:
  void AfterLayer(int, float*, int64_t) override {}
  void OnRouting(int layer, int64_t row0, const int32_t* experts, const float* weights, int64_t n,
                 int k) override {
    for (int64_t r = 0; r < n; ++r) {
      auto& slot = routes[layer][row0 + r];
      ++slot.calls;
      slot.experts.assign(experts + r * k, experts + (r + 1) * k);
      slot.weights.assign(weights + r * k, weights + (r + 1) * k);
    }
  }
  struct Route {
    int calls = 0;
    std::vector<int32_t> experts;
    std::vector<float> weights;
  };
  std::map<int, std::map<int64_t, Route>> routes;
};

// x[S, H] after every layer for `tokens` at positions first.. of `cache`, in pieces of `piece`
// rows (0: one pass).
std::vector<float> Prefill(const Qwen3Model& model, std::span<const int32_t> tokens, KvCache* cache,
                           int first, LayerHook* hook, size_t piece = 0) {
  const int64_t H = model.config().hidden;
  std::vector<float> x(tokens.size() * static_cast<size_t>(H));
  model.Embed(tokens, x.data());
  std::vector<ForwardRow> rows;
  for (size_t s = 0; s < tokens.size(); ++s) {
    const int p = first + static_cast<int>(s);
    rows.push_back({cache, p, {p, p, p}});
  }
  if (piece == 0) piece = rows.size();
  for (size_t b = 0; b < rows.size(); b += piece) {
    const size_t n = std::min(piece, rows.size() - b);
    model.RunLayers(x.data() + b * static_cast<size_t>(H),
                    std::span<const ForwardRow>(rows).subspan(b, n), hook);
  }
  return x;
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float f : v) m = std::max(m, std::abs(f));
  return m;
}

// MoeMlp with a model's prepared layer against the float64 reference on the same input rows, in
// every precision. The router is F32 in every precision and the input is the same, so the
// routing must be the same; the experts' outputs differ by the precision's rounding.
TEST(MoeModelTest, SparseMlpMatchesTheReferenceInEveryPrecision) {
  MoeTestSpec spec;
  const MoeTestModel tm(spec);
  const int64_t H = spec.hidden, M = 37, k = spec.top_k;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(M * H));
  for (float& f : m) f = nd(rng);
  std::vector<float> ref(m.size());
  std::vector<int32_t> ref_experts(static_cast<size_t>(M * k));
  std::vector<float> ref_weights(ref_experts.size());
  for (int64_t r = 0; r < M; ++r) {
    tm.ReferenceMlp(0, m.data() + r * H, ref.data() + r * H, ref_experts.data() + r * k,
                    ref_weights.data() + r * k);
  }
  const float scale = MaxAbs(ref);
  // f32: weights used as stored, f32 accumulation over K <= 64 and a polynomial exp in SiLU:
  // a few f32 roundings of the result. The others: BF16 (8-bit significands), Q8 (int8 per 32
  // columns, activations too), Q4 (4-bit codes per 32 columns) of weights and activations.
  const std::pair<kernels::Precision, float> cases[] = {{kernels::Precision::kF32, 2e-6f},
                                                        {kernels::Precision::kBF16, 1e-2f},
                                                        {kernels::Precision::kInt8, 2.5e-2f},
                                                        {kernels::Precision::kInt4, 0.15f}};
  for (const auto& [precision, tol] : cases) {
    SCOPED_TRACE(kernels::PrecisionName(precision));
    auto model = tm.Load(Dir(std::string("mlp_") + kernels::PrecisionName(precision)),
                         MoeLayout::kPerExpert, Options(precision));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const Qwen3Config& cfg = (*model)->config();
    std::vector<float> scratch(static_cast<size_t>(MoeScratchFloats(*cfg.moe, H, M)));
    std::vector<float> out(m.size());
    std::vector<int32_t> experts;
    std::vector<float> weights;
    MoeMlp((*model)->context(), *cfg.moe, (*model)->prepared().layer(0), m.data(), M, H,
           scratch.data(), out.data(), [&](const int32_t* e, const float* w) {
             experts.assign(e, e + M * k);
             weights.assign(w, w + M * k);
           });
    EXPECT_EQ(experts, ref_experts);
    for (size_t i = 0; i < weights.size(); ++i) EXPECT_NEAR(weights[i], ref_weights[i], 1e-6f);
    float err = 0;
    for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(out[i] - ref[i]));
    EXPECT_LE(err, tol * scale) << "max error " << err << " of max |out| " << scale;
  }
}

// A model whose attention adds nothing (o_proj zero) is x += Mlp(RmsNorm(x)) per layer: its
// whole f32 forward against the reference, over two chunks of rows (300 > kChunkRows), and the
// routing the hook reports against RouteTopK on the reference logits.
TEST(MoeModelTest, ForwardAndRoutingMatchTheReferenceAtF32) {
  MoeTestSpec spec;
  spec.zero_attention = true;
  spec.norm_topk_prob = false;
  const MoeTestModel tm(spec);
  auto model = tm.Load(Dir("forward"), MoeLayout::kFused, Options(kernels::Precision::kF32));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int S = 300;
  const int64_t H = spec.hidden, k = spec.top_k;
  const std::vector<int32_t> tokens = Tokens(S, spec.vocab, 5);
  auto cache = (*model)->NewCache(S).value();
  RoutingRecorder rec;
  const std::vector<float> x = Prefill(**model, tokens, cache.get(), 0, &rec);
  std::vector<float> want(x.size()), m(static_cast<size_t>(H)), mlp(static_cast<size_t>(H));
  for (int s = 0; s < S; ++s) {
    std::copy_n(tm.embed().data() + tokens[static_cast<size_t>(s)] * H, H, want.data() + s * H);
  }
  std::vector<int32_t> experts(static_cast<size_t>(k));
  std::vector<float> weights(static_cast<size_t>(k));
  for (int l = 0; l < spec.layers; ++l) {
    const bool sparse = tm.Config(MoeLayout::kFused).IsSparseLayer(l);
    EXPECT_EQ(rec.routes.count(l), sparse ? 1u : 0u) << "layer " << l;
    for (int s = 0; s < S; ++s) {
      float* row = want.data() + s * H;
      tm.ReferenceNorm(row, tm.layer(l).post_norm, m.data());
      tm.ReferenceMlp(l, m.data(), mlp.data(), experts.data(), weights.data());
      for (int64_t h = 0; h < H; ++h) row[h] += mlp[static_cast<size_t>(h)];
      if (!sparse) continue;
      const RoutingRecorder::Route& got = rec.routes[l][s];
      EXPECT_EQ(got.calls, 1) << "layer " << l << " row " << s;
      EXPECT_EQ(got.experts, experts) << "layer " << l << " row " << s;
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_NEAR(got.weights[static_cast<size_t>(j)], weights[static_cast<size_t>(j)], 1e-5f);
      }
    }
  }
  float err = 0;
  for (size_t i = 0; i < x.size(); ++i) err = std::max(err, std::abs(x[i] - want[i]));
  EXPECT_LE(err, 1e-5f * MaxAbs(want)) << "max error " << err;
}

// moe_stats() counts every sparse-layer call by its rows, with the distinct experts its
// routing named (what `vlstack bench` reports for a decode step of B slots).
TEST(MoeModelTest, RoutingStatsCountEachSparseCallsDistinctExperts) {
  MoeTestSpec spec;
  const MoeTestModel tm(spec);
  auto model = tm.Load(Dir("stats"), MoeLayout::kPerExpert, Options(kernels::Precision::kF32));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Qwen3Model& md = **model;
  const int S = 5;
  auto cache = md.NewCache(S).value();
  EXPECT_EQ(md.moe_stats().At(S).calls, 0u);
  RoutingRecorder rec;
  Prefill(md, Tokens(S, spec.vocab, 9), cache.get(), 0, &rec);
  uint64_t sparse = 0, distinct = 0;
  for (const auto& [layer, rows] : rec.routes) {
    std::set<int32_t> used;
    for (const auto& [row, route] : rows) used.insert(route.experts.begin(), route.experts.end());
    ++sparse;
    distinct += used.size();
  }
  ASSERT_GT(sparse, 0u);
  const MoeRoutingStats::Count c = md.moe_stats().At(S);
  EXPECT_EQ(c.calls, sparse);
  EXPECT_EQ(c.experts, distinct);
  EXPECT_GT(c.experts, c.calls * static_cast<uint64_t>(spec.top_k) - 1);  // at least k a call
  EXPECT_EQ(md.moe_stats().At(S + 1).calls, 0u);  // other row counts untouched
}

// The same logical weights in the fused and the per-expert layout prepare to the same bytes in
// every precision (the fused blocks' transpose is exact), so the models are one model.
TEST(MoeModelTest, FusedAndPerExpertLayoutsPrepareTheSameWeights) {
  MoeTestSpec spec;
  spec.dtype = DType::kBF16;
  const MoeTestModel tm(spec);
  for (kernels::Precision p : {kernels::Precision::kF32, kernels::Precision::kBF16,
                               kernels::Precision::kInt8, kernels::Precision::kInt4}) {
    SCOPED_TRACE(kernels::PrecisionName(p));
    const std::string n = kernels::PrecisionName(p);
    auto a = tm.Load(Dir("fused_" + n), MoeLayout::kFused, Options(p));
    auto b = tm.Load(Dir("per_expert_" + n), MoeLayout::kPerExpert, Options(p));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const PreparedWeights& pa = (*a)->prepared();
    const PreparedWeights& pb = (*b)->prepared();
    EXPECT_EQ(pa.LayoutText(), pb.LayoutText());
    ASSERT_EQ(pa.size(), pb.size());
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size()), 0);
    EXPECT_NE(pa.LayoutText().find("layers.2.experts.7.down"), std::string::npos);
    EXPECT_NE(pa.LayoutText().find("layers.0.router F32 [8, 64]"), std::string::npos);
    EXPECT_EQ(pa.LayoutText().find("layers.0.gate_up"), std::string::npos);
    const std::vector<int32_t> tokens = Tokens(9, spec.vocab, 1);
    auto ca = (*a)->NewCache(9).value();
    auto cb = (*b)->NewCache(9).value();
    EXPECT_EQ(Prefill(**a, tokens, ca.get(), 0, nullptr),
              Prefill(**b, tokens, cb.get(), 0, nullptr));
  }
}

// A row's result does not depend on the rows beside it: a prompt in pieces equals it in one
// pass, and a decode step of two sequences equals each sequence's step alone.
TEST(MoeModelTest, ChunkedPrefillAndBatchedDecodeMatchSeparatePasses) {
  MoeTestSpec spec;
  const MoeTestModel tm(spec);
  for (kernels::Precision p :
       {kernels::Precision::kF32, kernels::Precision::kInt8, kernels::Precision::kInt4}) {
    SCOPED_TRACE(kernels::PrecisionName(p));
    auto model = tm.Load(Dir(std::string("chunks_") + kernels::PrecisionName(p)),
                         MoeLayout::kPerExpert, Options(p));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const Qwen3Model& md = **model;
    const int64_t H = spec.hidden;
    const std::vector<int32_t> a = Tokens(40, spec.vocab, 2), c = Tokens(11, spec.vocab, 4);
    auto a1 = md.NewCache(41).value(), a2 = md.NewCache(41).value();
    auto c1 = md.NewCache(12).value(), c2 = md.NewCache(12).value();
    EXPECT_EQ(Prefill(md, a, a1.get(), 0, nullptr), Prefill(md, a, a2.get(), 0, nullptr, 17));
    Prefill(md, c, c1.get(), 0, nullptr);
    Prefill(md, c, c2.get(), 0, nullptr, 3);
    // One step of both sequences, then each alone on the other copies of their caches.
    const std::vector<int32_t> next = {7, 61};
    std::vector<float> both(static_cast<size_t>(2 * H));
    md.Embed(next, both.data());
    const ForwardRow rows[2] = {{a1.get(), 40, {40, 40, 40}}, {c1.get(), 11, {11, 11, 11}}};
    md.RunLayers(both.data(), rows, nullptr);
    const std::vector<float> one_a =
        Prefill(md, std::span(next).subspan(0, 1), a2.get(), 40, nullptr);
    const std::vector<float> one_c =
        Prefill(md, std::span(next).subspan(1, 1), c2.get(), 11, nullptr);
    EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + H), one_a);
    EXPECT_EQ(std::vector<float>(both.begin() + H, both.end()), one_c);
  }
}

// A MoE model compiled to an artifact maps back with the same entries, bytes and results.
TEST(MoeModelTest, PreparedArtifactRoundTrips) {
  MoeTestSpec spec;
  spec.dtype = DType::kBF16;
  const MoeTestModel tm(spec);
  for (kernels::Precision p : {kernels::Precision::kBF16, kernels::Precision::kInt4}) {
    SCOPED_TRACE(kernels::PrecisionName(p));
    const std::string n = kernels::PrecisionName(p);
    auto prepared = tm.Load(Dir("art_src_" + n), MoeLayout::kFused, Options(p));
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    const std::string path = Dir("art_" + n + ".vlsprep");
    ArtifactHeader h;
    h.identity = std::string(64, 'a');
    h.precision = n;
    ASSERT_TRUE(WritePreparedArtifact(path, h, (*prepared)->prepared(), nullptr).ok());
    auto mapped = tm.Load(Dir("art_dst_" + n), MoeLayout::kFused, Options(p, path));
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    const PreparedWeights& pa = (*prepared)->prepared();
    const PreparedWeights& pb = (*mapped)->prepared();
    EXPECT_EQ(pb.artifact_identity(), h.identity);
    EXPECT_EQ(pa.LayoutText(), pb.LayoutText());
    ASSERT_EQ(pa.size(), pb.size());
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size()), 0);
    const std::vector<int32_t> tokens = Tokens(6, spec.vocab, 9);
    auto ca = (*prepared)->NewCache(6).value();
    auto cb = (*mapped)->NewCache(6).value();
    EXPECT_EQ(Prefill(**prepared, tokens, ca.get(), 0, nullptr),
              Prefill(**mapped, tokens, cb.get(), 0, nullptr));
    // The per-expert layout plans the same entries, so its model maps the same artifact.
    auto other = tm.Load(Dir("art_other_" + n), MoeLayout::kPerExpert, Options(p, path));
    EXPECT_TRUE(other.ok()) << other.status().ToString();
  }
}

// inspect's figures: the experts' bytes, and a token reads k/E of them plus everything else.
TEST(MoeModelTest, PreparedBytesCountTheActiveExperts) {
  MoeTestSpec spec;
  const MoeTestModel tm(spec);
  auto model = tm.Load(Dir("bytes"), MoeLayout::kPerExpert, Options(kernels::Precision::kInt8));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<PreparedEntry>& entries = (*model)->prepared().entries();
  uint64_t total = 0, experts = 0;
  for (const PreparedEntry& e : entries) {
    total += e.bytes;
    if (e.name.find(".experts.") != std::string::npos) experts += e.bytes;
  }
  const PreparedBytes b = CountPreparedBytes((*model)->config(), entries);
  EXPECT_EQ(b.total, total);
  EXPECT_EQ(b.experts, experts);
  // Every expert matrix of one shape has the same bytes: exactly k/E of them, here 3/8.
  EXPECT_EQ(b.active_per_token, total - experts + experts * 3 / 8);
  EXPECT_GT(experts, total / 2);
}

// The serving plan counts a sparse layer's gathered rows.
TEST(MoeModelTest, ServingMemoryCountsTheGatheredRows) {
  MoeTestSpec spec;
  spec.top_k = 8;
  spec.experts = 16;
  spec.expert_intermediate = 256;
  const MoeTestModel tm(spec);
  Qwen3Config moe = tm.Config(MoeLayout::kFused);
  Qwen3Config dense = moe;
  dense.moe.reset();
  const ServingMemory a = PlanServingMemory(moe, KvDType::kF32, 512, 1, 2).value();
  const ServingMemory b = PlanServingMemory(dense, KvDType::kF32, 512, 1, 2).value();
  // 256 chunk rows × 8 experts × (H + 3·I_e) floats at least.
  EXPECT_GE(a.working - b.working,
            uint64_t{256} * 8 * (64 + 3 * 256) * 4 - 256 * (64 + 3 * 96) * 4);
}

}  // namespace
}  // namespace vls
