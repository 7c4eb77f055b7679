#include "vision/vision_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>

#include "base/checked_math.h"
#include "base/memory.h"
#include "kernels/kernels.h"
#include "vision/vision_attention.h"
#include "vision/vision_ops.h"

namespace vls {
namespace {

using vision_internal::PatchLayout;
using vision_internal::PhaseTimer;

constexpr float kLayerNormEps = 1e-6f;
// Query rows per attention work item (one head each: the tower has no grouped KV heads).
constexpr int64_t kAttentionRows = 32;

// Floats the fast path holds at once besides its outputs: x, xn, qkv, K and V per head
// [Np, 7·Dv]; the MLP hidden [Np, Iv]; cos/sin [Np, hd]; the merger hidden [Nv, m²·Dv].
std::optional<uint64_t> WorkingFloats(const VisionConfig& c, uint64_t np, uint64_t nv) {
  const uint64_t per_patch = 7 * static_cast<uint64_t>(c.hidden) +
                             static_cast<uint64_t>(c.intermediate) +
                             static_cast<uint64_t>(c.head_dim());
  const std::optional<uint64_t> a = CheckedMul(np, per_patch);
  const std::optional<uint64_t> b = CheckedMul(nv, static_cast<uint64_t>(c.merged_dim()));
  if (!a || !b) return std::nullopt;
  return CheckedAdd(*a, *b);
}

Status CheckConfig(const VisionConfig& c) {
  if (c.depth < 1 || c.hidden < 1 || c.intermediate < 1 || c.heads < 1 || c.hidden % c.heads != 0 ||
      c.head_dim() % 4 != 0 || c.spatial_merge_size < 1 || c.num_position_embeddings < 1 ||
      c.pos_grid_side() * c.pos_grid_side() != c.num_position_embeddings || c.out_hidden < 1 ||
      c.patch_size < 1 || c.temporal_patch_size < 1 || c.in_channels < 1) {
    return InvalidArgument("vision config is not valid (use ParseVisionConfig)");
  }
  for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
    const int j = c.deepstack_visual_indexes[k];
    if (j < 0 || j >= c.depth || (k > 0 && j <= c.deepstack_visual_indexes[k - 1])) {
      return InvalidArgument(
          "vision config: deepstack_visual_indexes must be strictly "
          "increasing in [0, depth)");
    }
  }
  return Status::Ok();
}

// Drops the resident checkpoint pages of every vision tensor once they are copied into the
// prepared weights (as the text decoder does, model/prepared_weights.cc), so the process does
// not hold both copies; ReferenceEncode faults them back in from the file when it runs.
void ReleaseVisionPages(const VisionWeights& w) {
  const auto release = [](const kernels::Matrix& m) {
    if (m.data != nullptr) {
      ReleaseFilePages(
          m.data, static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols) * DTypeSize(m.dtype));
    }
  };
  const auto linear = [&](const VisionRawLinear& l) {
    release(l.w);
    release(l.b);
  };
  const auto norm = [&](const VisionRawNorm& n) {
    release(n.w);
    release(n.b);
  };
  const auto merger = [&](const VisionRawMerger& m) {
    norm(m.norm);
    linear(m.fc1);
    linear(m.fc2);
  };
  linear(w.patch);
  release(w.pos);
  for (const VisionRawBlock& b : w.blocks) {
    norm(b.norm1);
    norm(b.norm2);
    linear(b.qkv);
    linear(b.proj);
    linear(b.fc1);
    linear(b.fc2);
  }
  merger(w.merger);
  for (const VisionRawMerger& m : w.deepstack) merger(m);
}

// The fast path's state for one Encode call.
class FastEncoder {
 public:
  FastEncoder(const VisionConfig& cfg, const PreparedVisionWeights& w, const kernels::Context& ctx)
      : cfg_(cfg),
        w_(w),
        ctx_(ctx),
        avx512_(kernels::IsAvx512Variant(ctx.variant())),
        gemm_attention_(ctx.precision() != kernels::Precision::kF32 &&
                        vision_internal::GemmAttentionAvailable(ctx)) {}

  void Run(std::span<const float> pixels, int64_t np, std::span<const GridThw> grids,
           VisionOutput& out, VisionDiagnostics* diag);

 private:
  void Block(int j);
  void Attention(const float* qkv_bias);
  // The f32 attention over qkv_ with its bias added (the blocked kernel, or the reference
  // variant's loops).
  void FloatAttention(double attention_flops);
  void Merger(const VisionMerger& m, bool postshuffle, float* out);
  // y[M, N] = x[M, K] · w[N, K]ᵀ as ctx_.MatMul calls over pieces of rows (ForPieces: a
  // multiple of 64 rows, about kLoopFlops each), so that no pool hold lasts long.
  void MatMulInPieces(const float* x, int64_t M, int64_t K, const kernels::Matrix& w,
                      float* y) const {
    const double row_flops = 2.0 * static_cast<double>(K) * static_cast<double>(w.rows);
    vision_internal::ForPieces(M, row_flops, 64, [&](int64_t r0, int64_t r1) {
      ctx_.MatMul(x + r0 * K, r1 - r0, K, w, y + r0 * w.rows);
    });
  }
  // MatMulInPieces timed as phase `p`.
  void MatMul(vision_internal::EncodePhase p, const float* x, int64_t M, int64_t K,
              const kernels::Matrix& w, float* y) const {
    const PhaseTimer t(
        p, 2.0 * static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(w.rows));
    MatMulInPieces(x, M, K, w, y);
  }

  const VisionConfig& cfg_;
  const PreparedVisionWeights& w_;
  const kernels::Context& ctx_;
  // Every variant but the reference is an AVX-512 one, chosen only on CPUs that have it.
  const bool avx512_;
  // Attention as BF16 GEMMs (vision_attention.h) in the BF16 and int8 precisions; the f32
  // precision keeps the f32 kernel.
  const bool gemm_attention_;
  int64_t np_ = 0, nv_ = 0;
  PatchLayout layout_;
  std::vector<float> x_, xn_, qkv_, kt_, vt_, h_, cos_, sin_, mh_;
};

void FastEncoder::Run(std::span<const float> pixels, int64_t np, std::span<const GridThw> grids,
                      VisionOutput& out, VisionDiagnostics* diag) {
  ThreadPool& pool = ctx_.pool();
  const int64_t Dv = cfg_.hidden, hd = cfg_.head_dim(), Md = cfg_.merged_dim();
  np_ = np;
  nv_ = np / cfg_.merge_unit();
  layout_ = vision_internal::MakePatchLayout(grids, cfg_.spatial_merge_size);
  const auto n = static_cast<size_t>(np);
  x_.resize(n * static_cast<size_t>(Dv));
  xn_.resize(n * static_cast<size_t>(Dv));
  qkv_.resize(n * static_cast<size_t>(3 * Dv));
  kt_.resize(n * static_cast<size_t>(Dv));
  vt_.resize(n * static_cast<size_t>(Dv));
  h_.resize(n * static_cast<size_t>(cfg_.intermediate));
  cos_.resize(n * static_cast<size_t>(hd / 2));
  sin_.resize(n * static_cast<size_t>(hd / 2));
  mh_.resize(static_cast<size_t>(nv_ * Md));

  // Patch embedding [Np, Dv] = pixels [Np, patch_dim] · Wᵀ + b, then the positions.
  MatMul(vision_internal::kPhasePatch, pixels.data(), np, cfg_.patch_dim(), w_.patch().w,
         x_.data());
  vision_internal::AddBias(x_.data(), np, Dv, w_.patch().b, pool, avx512_);
  vision_internal::InterpolatePositions(layout_, grids, w_.pos(), cfg_.pos_grid_side(), Dv,
                                        xn_.data(), pool);
  if (diag != nullptr) {
    diag->patch_embeds = x_;
    diag->pos_embeds = xn_;
    diag->blocks.assign(static_cast<size_t>(cfg_.depth), {});
  }
  pool.ParallelFor(np * Dv, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x_[static_cast<size_t>(i)] += xn_[static_cast<size_t>(i)];
  });
  vision_internal::RotaryTables(layout_, hd, cos_.data(), sin_.data(), pool);

  const int64_t O = cfg_.out_hidden;
  out.embeds.resize(static_cast<size_t>(nv_ * O));
  out.deepstack.resize(cfg_.deepstack_visual_indexes.size() * static_cast<size_t>(nv_ * O));
  for (int j = 0; j < cfg_.depth; ++j) {
    Block(j);
    if (diag != nullptr) diag->blocks[static_cast<size_t>(j)] = x_;
    const auto& ds = cfg_.deepstack_visual_indexes;
    const auto it = std::find(ds.begin(), ds.end(), j);
    if (it != ds.end()) {
      const auto k = static_cast<int>(it - ds.begin());
      Merger(w_.deepstack(k), /*postshuffle=*/true, out.deepstack.data() + k * nv_ * O);
    }
  }
  Merger(w_.merger(), /*postshuffle=*/false, out.embeds.data());
}

// x = x + proj(Attn(LN1(x))); x = x + fc2(gelu_tanh(fc1(LN2(x)))).
void FastEncoder::Block(int j) {
  using namespace vision_internal;  // NOLINT(google-build-using-namespace): phase names
  ThreadPool& pool = ctx_.pool();
  const VisionBlock& b = w_.block(j);
  const int64_t Dv = cfg_.hidden, Iv = cfg_.intermediate;
  {
    const PhaseTimer t(kPhaseNorm, 0);
    LayerNormRows(x_.data(), np_, Dv, b.norm1.w, b.norm1.b, kLayerNormEps, xn_.data(), pool,
                  avx512_);
  }
  MatMul(kPhaseQkv, xn_.data(), np_, Dv, b.qkv.w, qkv_.data());   // [Np, 3·Dv]: q | k | v
  Attention(b.qkv.b);                                             // -> xn_ [Np, Dv]
  MatMul(kPhaseProj, xn_.data(), np_, Dv, b.proj.w, kt_.data());  // kt_ reused as [Np, Dv]
  {
    const PhaseTimer t(kPhaseNorm, 0);
    AddBiasResidualLayerNorm(x_.data(), kt_.data(), np_, Dv, b.proj.b, b.norm2.w, b.norm2.b,
                             kLayerNormEps, xn_.data(), pool, avx512_);
  }
  MatMul(kPhaseFc1, xn_.data(), np_, Dv, b.fc1.w, h_.data());  // [Np, Iv]
  {
    const PhaseTimer t(kPhaseGelu, 0);
    AddBiasGeluTanh(h_.data(), np_, Iv, b.fc1.b, avx512_, pool);
  }
  MatMul(kPhaseFc2, h_.data(), np_, Iv, b.fc2.w, kt_.data());  // [Np, Dv]
  {
    const PhaseTimer t(kPhaseBias, 0);
    AddBiasResidual(x_.data(), kt_.data(), np_, Dv, b.fc2.b, pool, avx512_);
  }
}

// qkv_ [Np, 3, heads, hd] -> rotary on q and k -> per-segment bidirectional attention of each
// head -> xn_ [Np, heads·hd].
void FastEncoder::Attention(const float* qkv_bias) {
  ThreadPool& pool = ctx_.pool();
  const int64_t Dv = cfg_.hidden, hd = cfg_.head_dim(), heads = cfg_.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  double attention_flops = 0;
  for (size_t s = 0; s + 1 < layout_.segments.size(); ++s) {
    const auto L = static_cast<double>(layout_.segments[s + 1] - layout_.segments[s]);
    attention_flops += 4.0 * L * L * static_cast<double>(Dv);
  }
  if (gemm_attention_) {
    // BF16 q, k [heads, Np, hd] in kt_'s storage, V transposed per segment in vt_'s.
    const vision_internal::HeadsBf16 hb{.q = reinterpret_cast<uint16_t*>(kt_.data()),
                                        .k = reinterpret_cast<uint16_t*>(kt_.data()) + np_ * Dv,
                                        .vt = reinterpret_cast<uint16_t*>(vt_.data())};
    {
      const PhaseTimer t(vision_internal::kPhaseRope, 0);
      vision_internal::PackHeadsBf16(qkv_.data(), qkv_bias, cos_.data(), sin_.data(), np_, heads,
                                     hd, layout_.segments, hb, ctx_);
    }
    const PhaseTimer t(vision_internal::kPhaseAttention, attention_flops);
    const Status s = vision_internal::GemmAttention(hb, np_, heads, hd, layout_.segments, scale,
                                                    xn_.data(), ctx_);
    if (s.ok()) return;
    // oneDNN refused (it does not on the CPUs it reported available for): the f32 kernel.
    std::fprintf(stderr, "vlstack: vision attention through oneDNN failed (%s); using f32\n",
                 s.ToString().c_str());
  }
  {
    const PhaseTimer t(vision_internal::kPhaseBias, 0);
    vision_internal::AddBias(qkv_.data(), np_, 3 * Dv, qkv_bias, pool, avx512_);
  }
  FloatAttention(attention_flops);
}

void FastEncoder::FloatAttention(double attention_flops) {
  ThreadPool& pool = ctx_.pool();
  const int64_t Dv = cfg_.hidden, hd = cfg_.head_dim(), heads = cfg_.heads, half = hd / 2;
  const PhaseTimer timer(vision_internal::kPhaseAttention, attention_flops);
  // Rotate q in place; rotate k and copy k, v per head into contiguous [heads, Np, hd].
  pool.ParallelFor(np_, std::max<int64_t>(1, 256 / heads), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = qkv_.data() + r * 3 * Dv;
      const float* c = cos_.data() + r * half;
      const float* s = sin_.data() + r * half;
      for (int64_t h = 0; h < heads; ++h) {
        ctx_.ApplyRope(row + h * hd, c, s, hd);
        ctx_.ApplyRope(row + Dv + h * hd, c, s, hd);
        std::copy_n(row + Dv + h * hd, hd, kt_.data() + (h * np_ + r) * hd);
        std::copy_n(row + 2 * Dv + h * hd, hd, vt_.data() + (h * np_ + r) * hd);
      }
    }
  });

  struct RowBlock {
    int64_t m0, rows, seg_begin, seg_len;
  };
  std::vector<RowBlock> blocks;
  for (size_t s = 0; s + 1 < layout_.segments.size(); ++s) {
    const int64_t a = layout_.segments[s], e = layout_.segments[s + 1];
    for (int64_t m0 = a; m0 < e; m0 += kAttentionRows) {
      blocks.push_back({m0, std::min(kAttentionRows, e - m0), a, e - a});
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const auto items = static_cast<int64_t>(blocks.size()) * heads;
  const kernels::KernelVariant& variant = ctx_.variant();
  if (variant.attention != nullptr) {
    std::vector<int32_t> last(static_cast<size_t>(np_));  // [Np] last key of the row's segment
    for (const RowBlock& b : blocks) {
      std::fill_n(last.begin() + b.m0, b.rows, static_cast<int32_t>(b.seg_len - 1));
    }
    // In pieces of items (ForPieces), each item costing up to 4 · rows · keys · hd.
    const double item_flops =
        4.0 * static_cast<double>(kAttentionRows * hd) * static_cast<double>(np_);
    vision_internal::ForPieces(items, item_flops, pool.threads(), [&](int64_t p0, int64_t p1) {
      pool.ParallelFor(p1 - p0, 1, [&](int64_t j0, int64_t j1, int thread) {
        for (int64_t it = p0 + j0; it < p0 + j1; ++it) {
          const RowBlock& b = blocks[static_cast<size_t>(it / heads)];
          const int64_t h = it % heads;
          kernels::AttentionTile tile;
          tile.q = qkv_.data() + b.m0 * 3 * Dv + h * hd;
          tile.q_row_stride = 3 * Dv;
          tile.k = kt_.data() + (h * np_ + b.seg_begin) * hd;
          tile.v = vt_.data() + (h * np_ + b.seg_begin) * hd;
          tile.last = last.data() + b.m0;
          tile.rows = b.rows;
          tile.group = 1;
          tile.head_dim = hd;
          tile.scale = scale;
          tile.out = xn_.data() + b.m0 * Dv + h * hd;
          tile.out_row_stride = Dv;
          variant.attention(tile, ctx_.scratch(thread).attention);
        }
      });
    });
    return;
  }
  // The reference variant: scores, softmax and weighted sum per (row, head).
  pool.ParallelFor(items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    for (int64_t it = i0; it < i1; ++it) {
      const RowBlock& b = blocks[static_cast<size_t>(it / heads)];
      const int64_t h = it % heads;
      const float* k = kt_.data() + (h * np_ + b.seg_begin) * hd;
      const float* v = vt_.data() + (h * np_ + b.seg_begin) * hd;
      scores.resize(static_cast<size_t>(b.seg_len));
      for (int64_t r = b.m0; r < b.m0 + b.rows; ++r) {
        ctx_.Scores(qkv_.data() + r * 3 * Dv + h * hd, k, hd, b.seg_len, hd, scale, scores.data());
        kernels::Softmax(scores.data(), b.seg_len);
        ctx_.WeightedSum(scores.data(), v, hd, b.seg_len, hd, xn_.data() + r * Dv + h * hd);
      }
    }
  });
}

// out [Nv, O] = fc2(gelu_erf(fc1(z))), z = the m² rows of each window side by side, normed
// over m²·Dv after the concatenation (DeepStack, "postshuffle") or over Dv per patch before it
// (main merger). Rows of a window are consecutive, so [Np, Dv] is [Nv, m²·Dv] in place.
void FastEncoder::Merger(const VisionMerger& m, bool postshuffle, float* out) {
  const PhaseTimer timer(vision_internal::kPhaseMerger, 0);
  ThreadPool& pool = ctx_.pool();
  const int64_t Dv = cfg_.hidden, Md = cfg_.merged_dim(), O = cfg_.out_hidden;
  if (postshuffle) {
    vision_internal::LayerNormRows(x_.data(), nv_, Md, m.norm.w, m.norm.b, kLayerNormEps,
                                   xn_.data(), pool, avx512_);
  } else {
    vision_internal::LayerNormRows(x_.data(), np_, Dv, m.norm.w, m.norm.b, kLayerNormEps,
                                   xn_.data(), pool, avx512_);
  }
  MatMulInPieces(xn_.data(), nv_, Md, m.fc1.w, mh_.data());  // [Nv, Md]
  vision_internal::AddBiasGeluErf(mh_.data(), nv_, Md, m.fc1.b, pool);
  MatMulInPieces(mh_.data(), nv_, Md, m.fc2.w, out);  // [Nv, O]
  vision_internal::AddBias(out, nv_, O, m.fc2.b, pool, avx512_);
}

}  // namespace

StatusOr<std::unique_ptr<VisionModel>> VisionModel::Load(const std::string& dir,
                                                         const VisionConfig& cfg,
                                                         const kernels::Context& ctx) {
  VLS_RETURN_IF_ERROR(CheckConfig(cfg));
  std::unique_ptr<VisionModel> m(new VisionModel(cfg, ctx));
  VLS_ASSIGN_OR_RETURN(m->ckpt_, SafetensorsCheckpoint::Open(dir));
  auto raw = BindVisionWeights(m->cfg_, *m->ckpt_);
  if (!raw.ok()) return raw.status().WithContext(dir);
  m->raw_ = std::move(*raw);
  try {
    auto prepared = PreparedVisionWeights::Prepare(m->cfg_, m->raw_, ctx,
                                                   /*release_source_pages=*/true);
    if (!prepared.ok()) return prepared.status().WithContext(dir);
    m->prepared_ = std::move(*prepared);
    ReleaseVisionPages(m->raw_);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(dir + ": out of memory preparing the vision tower weights");
  }
  return m;
}

StatusOr<int64_t> VisionModel::Validate(std::span<const float> pixel_values, int64_t rows,
                                        std::span<const GridThw> grids, bool diagnostics) const {
  const int unit = cfg_.merge_unit();
  VLS_ASSIGN_OR_RETURN(
      const int64_t nv,
      ValidateGridList(grids, cfg_.spatial_merge_size, "image_grid_thw", kMaxVisionPatches / unit));
  const int64_t np = nv * unit;
  if (rows != np) {
    return InvalidArgument("pixel_values has " + std::to_string(rows) +
                           " rows but image_grid_thw declares " + std::to_string(np) +
                           " patches (sum of t*h*w)");
  }
  const int64_t dim = cfg_.patch_dim();
  if (static_cast<uint64_t>(pixel_values.size()) != static_cast<uint64_t>(np * dim)) {
    return InvalidArgument("pixel_values holds " + std::to_string(pixel_values.size()) +
                           " values; " + std::to_string(np) + " rows of patch size " +
                           std::to_string(dim) + " need " + std::to_string(np * dim));
  }
  for (size_t i = 0; i < pixel_values.size(); ++i) {
    if (!std::isfinite(pixel_values[i])) {
      return InvalidArgument("pixel_values[" + std::to_string(i / static_cast<size_t>(dim)) + ", " +
                             std::to_string(i % static_cast<size_t>(dim)) + "] is not finite");
    }
  }
  // Working set + outputs (+ diagnostics), all f32.
  const auto unp = static_cast<uint64_t>(np), unv = static_cast<uint64_t>(nv);
  std::optional<uint64_t> floats = WorkingFloats(cfg_, unp, unv);
  const uint64_t outs =
      (cfg_.deepstack_visual_indexes.size() + 1) * unv * static_cast<uint64_t>(cfg_.out_hidden);
  if (floats) floats = CheckedAdd(*floats, outs);
  if (floats && diagnostics) {
    const std::optional<uint64_t> d =
        CheckedMul(unp * static_cast<uint64_t>(cfg_.hidden), static_cast<uint64_t>(cfg_.depth) + 2);
    floats = d ? CheckedAdd(*floats, *d) : std::nullopt;
  }
  const std::optional<uint64_t> bytes = floats ? CheckedMul(*floats, 4) : std::nullopt;
  VLS_RETURN_IF_ERROR(
      CheckMemoryFits("the vision tower's working memory for " + std::to_string(np) + " patches",
                      bytes.value_or(UINT64_MAX), QueryMemoryAvailability()));
  return nv;
}

StatusOr<VisionOutput> VisionModel::Encode(std::span<const float> pixel_values, int64_t rows,
                                           std::span<const GridThw> grids,
                                           VisionDiagnostics* diagnostics) const {
  VLS_ASSIGN_OR_RETURN(const int64_t nv,
                       Validate(pixel_values, rows, grids, diagnostics != nullptr));
  VisionOutput out;
  out.tokens = nv;
  if (diagnostics != nullptr) *diagnostics = VisionDiagnostics{};
  if (nv == 0) return out;
  try {
    FastEncoder enc(cfg_, *prepared_, ctx_);
    enc.Run(pixel_values, rows, grids, out, diagnostics);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory encoding " + std::to_string(rows) +
                             " patches in the vision tower");
  }
  return out;
}

}  // namespace vls

namespace vls {

StatusOr<std::unique_ptr<VisionModel>> VisionModel::FromPrepared(
    const std::string& dir, const VisionConfig& cfg, const kernels::Context& ctx,
    std::unique_ptr<PreparedVisionWeights> prepared) {
  VLS_RETURN_IF_ERROR(CheckConfig(cfg));
  if (prepared == nullptr) return InvalidArgument(dir + ": no prepared vision weights given");
  std::unique_ptr<VisionModel> m(new VisionModel(cfg, ctx));
  VLS_ASSIGN_OR_RETURN(m->ckpt_, SafetensorsCheckpoint::Open(dir));
  auto raw = BindVisionWeights(m->cfg_, *m->ckpt_);
  if (!raw.ok()) return raw.status().WithContext(dir);
  m->raw_ = std::move(*raw);
  VLS_RETURN_IF_ERROR(CheckPreparedVisionLayout(prepared->entries(),
                                                PlanPreparedVisionEntries(m->raw_, ctx.precision()),
                                                dir + ": the prepared vision weights"));
  m->prepared_ = std::move(prepared);
  return m;
}

}  // namespace vls
