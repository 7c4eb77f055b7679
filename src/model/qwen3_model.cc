#include "model/qwen3_model.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <new>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "base/checked_math.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/moe_mlp.h"
#include "model/weight_check.h"

namespace vls {

namespace {

// A layer's row-wise work runs over chunks of at most this many rows, so its scratch is sized
// by the chunk, not the prompt (40 KB a row for the 0.6B model, 80 KB for the 2B). Every
// chunk re-reads the layer's weights; 256 rows keep that small next to the arithmetic and
// every matmul far above oneDNN's minimum.
constexpr int64_t kChunkRows = 256;

// How many different experts the n entries of `experts` (each in [0, E), E <= kMaxExperts as
// the config enforces) name. A stack bitset: this runs on every sparse-layer call of decode.
int64_t DistinctExperts(const int32_t* experts, int64_t n) {
  std::bitset<kMaxExperts> seen;
  int64_t distinct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto e = static_cast<size_t>(experts[i]);
    if (!seen[e]) ++distinct;
    seen[e] = true;
  }
  return distinct;
}

}  // namespace

KvDType DefaultKvDType(kernels::Precision precision) {
  return precision == kernels::Precision::kF32 ? KvDType::kF32 : KvDType::kBf16;
}

std::string ServingMemory::Describe(int slots) const {
  return std::to_string(slots) + " slot(s) x (KV cache " + FormatBytes(kv_per_slot) + " + " +
         FormatBytes(other_per_slot) + ") + working buffers " + FormatBytes(working);
}

StatusOr<ServingMemory> PlanServingMemory(const Qwen3Config& cfg, KvDType kv_dtype, int capacity,
                                          int slots, int threads) {
  const auto overflow = [&](const char* what) {
    return ResourceExhausted(std::string(what) + " of capacity " + std::to_string(capacity) +
                             " and " + std::to_string(slots) + " slot(s) overflows 64 bits");
  };
  if (capacity < 0 || slots < 0 || threads < 0) return overflow("the memory");
  ServingMemory m;
  const std::optional<uint64_t> kv =
      // A BF16 cache may pad to whole key tiles (KvCache): plan for it.
      KvCache::Bytes(cfg.layers, capacity, cfg.kv_heads, cfg.head_dim, kv_dtype,
                     kv_dtype == KvDType::kBf16);
  if (!kv) return overflow("the KV cache");
  m.kv_per_slot = *kv;
  const auto C = static_cast<uint64_t>(capacity), V = static_cast<uint64_t>(cfg.vocab);
  const auto H = static_cast<uint64_t>(cfg.hidden), I = static_cast<uint64_t>(cfg.intermediate);
  const auto qd = static_cast<uint64_t>(cfg.heads) * static_cast<uint64_t>(cfg.head_dim);
  const auto kvd = static_cast<uint64_t>(cfg.kv_heads) * static_cast<uint64_t>(cfg.head_dim);
  // Per slot: its logits [V] f32, and per row a prefix key (16 bytes) and a prompt id.
  const std::optional<uint64_t> row_book = CheckedMul(C, 16 + 4);
  const std::optional<uint64_t> other = row_book ? CheckedAdd(*row_book, V * 4) : std::nullopt;
  if (!other) return overflow("the slot bookkeeping");
  m.other_per_slot = *other;
  // One pass of C rows: the residual stream and a normed copy [C, H] f32, the last row's
  // logits [V], the layer scratch of one chunk of kChunkRows rows (RunLayerChunk), the BF16 /
  // Q8 activations of its matmuls, and per participant the attention scores of one query [C].
  const uint64_t chunk = std::min<uint64_t>(C, kChunkRows);
  const uint64_t layer_floats =
      std::max(std::max(H, qd) + std::max(qd + 2 * kvd, H) + qd, H + 3 * I);
  uint64_t layer_bytes = chunk * (layer_floats * 4 + std::max(H, I) * 4);
  if (cfg.moe) {
    // A sparse layer (MoeMlp): the normed rows [chunk, H], the router logits [chunk, E], the
    // routing, and the chunk·k gathered rows [chunk·k, H + 3·I_e], whose BF16 / Q8
    // activations the expert matmuls convert as well.
    const auto rk = chunk * static_cast<uint64_t>(cfg.moe->top_k);
    const auto Ie = static_cast<uint64_t>(cfg.moe->expert_intermediate);
    const auto moe_floats =
        static_cast<uint64_t>(MoeScratchFloats(*cfg.moe, cfg.hidden, static_cast<int64_t>(chunk)));
    layer_bytes =
        std::max(layer_bytes, (chunk * H + 16 + moe_floats) * 4 + rk * std::max(H, Ie) * 4);
  }
  uint64_t working = layer_bytes + V * 4;
  const std::optional<uint64_t> rows = CheckedMul(C, 2 * H * 4);
  const std::optional<uint64_t> scores = CheckedMul(C, 8 * static_cast<uint64_t>(threads) + 8);
  if (!rows || !scores) return overflow("the working memory");
  const std::optional<uint64_t> w = CheckedAdd(working, *rows);
  const std::optional<uint64_t> w2 = w ? CheckedAdd(*w, *scores) : std::nullopt;
  if (!w2) return overflow("the working memory");
  m.working = *w2;
  const std::optional<uint64_t> per_slot = CheckedAdd(m.kv_per_slot, m.other_per_slot);
  const std::optional<uint64_t> slots_bytes =
      per_slot ? CheckedMul(*per_slot, static_cast<uint64_t>(slots)) : std::nullopt;
  const std::optional<uint64_t> total =
      slots_bytes ? CheckedAdd(*slots_bytes, m.working) : std::nullopt;
  if (!total) return overflow("the KV caches");
  m.total = *total;
  return m;
}

StatusOr<std::unique_ptr<Qwen3Model>> Qwen3Model::Load(const std::string& dir) {
  return Load(dir, ModelOptions{});
}

StatusOr<std::unique_ptr<Qwen3Model>> Qwen3Model::Load(const std::string& dir,
                                                       const ModelOptions& options) {
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return InvalidArgument("model options: threads " + std::to_string(options.threads) +
                           " is outside [0, " + std::to_string(kMaxThreads) +
                           "] (0: all hardware threads)");
  }
  VLS_ASSIGN_OR_RETURN(Qwen3Config cfg, LoadQwen3Config(dir));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> ckpt,
                       SafetensorsCheckpoint::Open(dir));
  auto w = BindQwen3Weights(cfg, *ckpt);
  if (!w.ok()) return w.status().WithContext(dir);
  auto model = FromWeights(std::move(cfg), std::move(ckpt), std::move(*w), options);
  if (!model.ok()) return model.status().WithContext(dir);
  return model;
}

StatusOr<std::unique_ptr<Qwen3Model>> Qwen3Model::FromWeights(
    Qwen3Config cfg, std::unique_ptr<SafetensorsCheckpoint> ckpt, Qwen3Weights w,
    const ModelOptions& options) {
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return InvalidArgument("model options: threads " + std::to_string(options.threads) +
                           " is outside [0, " + std::to_string(kMaxThreads) +
                           "] (0: all hardware threads)");
  }
  // The context starts the thread pool: a thread the system refuses is an error, not an abort.
  std::unique_ptr<kernels::Context> ctx;
  try {
    ctx = std::make_unique<kernels::Context>(options.threads, options.precision, options.variant);
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string(e.what()) +
                             "; lower --threads or raise the process limits (ulimit -u, -v)");
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory starting " + std::to_string(options.threads) +
                             " kernel threads");
  } catch (const std::invalid_argument& e) {
    return InvalidArgument(e.what());
  }
  const bool check = options.check_weights && options.artifact.empty();
  if (check) VLS_RETURN_IF_ERROR(CheckUnpreparedWeights(cfg, w, *ctx));
  VLS_ASSIGN_OR_RETURN(
      std::unique_ptr<PreparedWeights> prepared,
      options.artifact.empty()
          ? PreparedWeights::Prepare(cfg, w, *ctx, options.progress, check)
          : PreparedWeights::FromArtifact(options.artifact, cfg, w, options.precision,
                                          options.artifact_memory));
  std::unique_ptr<Qwen3Model> model(
      new Qwen3Model(std::move(cfg), std::move(ckpt), std::move(w), std::move(ctx)));
  model->prepared_ = std::move(prepared);
  model->kv_dtype_ = options.kv_dtype.value_or(DefaultKvDType(options.precision));
  return model;
}

KvShape Qwen3Model::kv_shape() const {
  // Key tiles when the kernels' attention multiplies a BF16 cache in BF16 (ADR 0022).
  const bool key_tiles = kv_dtype_ == KvDType::kBf16 && ctx_->variant().attention_bf16_products &&
                         cfg_.head_dim % 32 == 0;
  return {cfg_.layers, cfg_.kv_heads, cfg_.head_dim, kv_dtype_, key_tiles};
}

StatusOr<std::unique_ptr<KvCache>> Qwen3Model::NewCache(int capacity) const {
  const KvShape s = kv_shape();
  return KvCache::Create(s.layers, capacity, s.kv_heads, s.head_dim, s.dtype, s.key_tiles);
}

void Qwen3Model::Embed(std::span<const int32_t> tokens, float* out) const {
  const kernels::Matrix& e = weights_.embed;
  const auto H = static_cast<size_t>(cfg_.hidden);
  const size_t row_bytes = H * DTypeSize(e.dtype);
  const auto* table = static_cast<const std::byte*>(e.data);
  if (weights_.embed_file != nullptr) {
    // Rows are copied out of the page cache with pread: a lookup through the mapping faults in
    // a whole page-cache folio (about 1 MB a row measured on the 2B checkpoint), which stays
    // resident until released, and releasing it (madvise over the table) cost about as much
    // again: 0.5 ms per 8-row decode step on the 0.6B shape, against about 10 µs here.
    // The row buffer is the caller's (participant 0's while it holds the pool).
    const ThreadPool::Lease lease(ctx_->pool());
    auto* row = ctx_->scratch(lease.thread()).embed_row.Reserve<std::byte>(row_bytes);
    const kernels::Matrix one{e.dtype, row, 1, e.cols};
    bool ok = true;
    for (size_t s = 0; s < tokens.size() && ok; ++s) {
      ok = weights_.embed_file
               ->ReadAt(table + static_cast<size_t>(tokens[s]) * row_bytes, row_bytes, row)
               .ok();
      if (ok) kernels::LoadRow(one, 0, out + s * H);
    }
    if (ok) return;
    // A failed read falls back to the mapping below, as before pread was used here.
  }
  // Weights without a file (bound by hand), or a failed read: read through the mapping and drop
  // the pages again every kReleaseRows rows (a madvise per row cost about 4% of 0.6B prefill).
  constexpr size_t kReleaseRows = 8;
  const size_t table_bytes = static_cast<size_t>(e.rows) * row_bytes;
  for (size_t s = 0; s < tokens.size(); ++s) {
    kernels::LoadRow(e, tokens[s], out + s * H);
    if ((s + 1) % kReleaseRows == 0 || s + 1 == tokens.size()) {
      ReleaseFilePages(e.data, table_bytes);
    }
  }
}

void Qwen3Model::Attention(int layer, const float* a, std::span<const ForwardRow> rows,
                           const AttentionScratch& t, float* out) const {
  const Qwen3LayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
  const PreparedLayer& P = prepared_->layer(layer);
  const int64_t M = static_cast<int64_t>(rows.size());
  const int64_t H = cfg_.hidden, D = cfg_.head_dim, nh = cfg_.heads, nkv = cfg_.kv_heads;
  const int64_t qd = nh * D, kvd = nkv * D, qkvd = qd + 2 * kvd;
  float* qkv = t.qkv;  // [M, nh·D + 2·nkv·D]: q heads | k heads | v heads per row
  float* q = t.q;      // [M, nh, D]
  ctx_->MatMul(a, M, H, P.qkv, qkv);
  // Per row and head: q and k heads get RMSNorm (weight [D]) and RoPE, q into q, k and v
  // into the row's cache. Every row's K/V is written before attention runs, so prefill rows
  // see all earlier rows of their sequence. Work items are (row, group of heads): rows are split
  // into groups of heads only when there are fewer rows than threads (decode of one sequence).
  // A row's cos/sin come from the participant's RoPE cache (computed once per thread and step
  // in decode).
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const int64_t heads = nh + 2 * nkv;
  const int64_t threads = ctx_->pool().threads();
  const int64_t groups = M >= threads ? 1 : std::min<int64_t>(4, (2 * threads + M - 1) / M);
  const int64_t per_group = (heads + groups - 1) / groups;
  ctx_->pool().ParallelFor(M * groups, 1, [&](int64_t b, int64_t e, int thread) {
    kernels::ScratchArena& own = ctx_->scratch(thread);
    float* kh = own.head.Reserve<float>(static_cast<size_t>(D));  // [D]
    for (int64_t it = b; it < e; ++it) {
      const int64_t m = it / groups, h0 = (it % groups) * per_group;
      const ForwardRow& r = rows[static_cast<size_t>(m)];
      const float* cs = rope_.CachedCosSin(r.coord, own.rope);  // cos [D/2] | sin [D/2]
      const float* row = qkv + m * qkvd;
      for (int64_t h = h0; h < std::min(heads, h0 + per_group); ++h) {
        if (h < nh) {
          float* qh = q + (m * nh + h) * D;
          ctx_->RmsNorm(row + h * D, 1, D, L.q_norm.data(), eps, qh);
          ctx_->ApplyRope(qh, cs, cs + D / 2, D);
        } else if (h < nh + nkv) {
          ctx_->RmsNorm(row + h * D, 1, D, L.k_norm.data(), eps, kh);
          ctx_->ApplyRope(kh, cs, cs + D / 2, D);
          r.cache->WriteHead(layer, static_cast<int>(h - nh), r.index, kh, nullptr);
        } else {
          r.cache->WriteHead(layer, static_cast<int>(h - nh - nkv), r.index, nullptr, row + h * D);
        }
      }
    }
  });
  const AttentionShape shape{nh, nkv, D};
  float* ctx = t.ctx;  // [M, nh, D]
  Attend(*ctx_, layer, shape, q, rows, ctx);
  ctx_->MatMul(ctx, M, nh * D, P.o, out);
}

void Qwen3Model::RunLayer(int l, float* x, std::span<const ForwardRow> rows,
                          LayerHook* hook) const {
  // Every row's output is computed by the same per-row operations whatever the chunking
  // (matmul rows, Q8 activation scales and attention queries are independent), and chunk c
  // attends to the K/V that chunks before it wrote. Equal chunks rather than a short tail
  // keep each matmul on the same side of oneDNN's row threshold as the whole pass.
  const auto M = static_cast<int64_t>(rows.size());
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  const int64_t per_chunk = chunks > 0 ? (M + chunks - 1) / chunks : 0;
  for (int64_t m0 = 0; m0 < M; m0 += per_chunk) {
    const int64_t n = std::min(per_chunk, M - m0);
    RunLayerChunk(l, x + m0 * cfg_.hidden,
                  rows.subspan(static_cast<size_t>(m0), static_cast<size_t>(n)), hook, m0);
  }
}

void Qwen3Model::RunLayerChunk(int l, float* x, std::span<const ForwardRow> rows, LayerHook* hook,
                               int64_t row0) const {
  const int64_t M = static_cast<int64_t>(rows.size());
  const int64_t H = cfg_.hidden, I = cfg_.intermediate;
  const int64_t qd = cfg_.heads * cfg_.head_dim, kvd = cfg_.kv_heads * cfg_.head_dim;
  const Qwen3LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
  const PreparedLayer& P = prepared_->layer(l);
  // The chunk's activations live in the caller's scratch arena (participant 0's), reused
  // across layers and calls, so the caller holds the pool for the whole chunk: a concurrent
  // forward of another cache waits for it rather than interleaving loop by loop.
  const ThreadPool::Lease lease(ctx_->pool());
  // The attention and MLP halves run one after the other over one buffer; within each, a
  // buffer takes the place of one that is dead by then (ctx of a, the output of qkv, the MLP
  // output of its input).
  const int64_t slot0 = std::max(H, qd), slot1 = std::max(qd + 2 * kvd, H);
  // A sparse layer's MLP scratch (MoeMlp's) follows a, from a 64-byte boundary.
  const bool sparse = cfg_.IsSparseLayer(l);
  const int64_t moe_at = (M * H + 15) / 16 * 16;
  const int64_t attention_floats = M * (slot0 + slot1 + qd);
  const int64_t mlp_floats = sparse ? moe_at + MoeScratchFloats(*cfg_.moe, H, M) : M * (H + 3 * I);
  float* base =
      ctx_->scratch(lease.thread())
          .layer.Reserve<float>(static_cast<size_t>(std::max(attention_floats, mlp_floats)));
  AttentionScratch t;
  float* a = base;                   // [M, H] normed input
  t.ctx = base;                      // [M, nh, D], after a is consumed
  t.qkv = base + M * slot0;          // [M, nh·D + 2·nkv·D]
  float* attn_out = t.qkv;           // [M, H], after qkv is split
  t.q = t.qkv + M * slot1;           // [M, nh, D]
  float* gate_up = base + M * H;     // [M, 2·I]: gate | up per row
  float* act = gate_up + M * 2 * I;  // [M, I]
  float* mlp_out = base;             // [M, H], after a is consumed
  // x = x + Attention(RmsNorm(x))
  AddNorm(x, nullptr, M, L.input_norm.data(), a);
  Attention(l, a, rows, t, attn_out);
  // x = x + Down(SiLU(Gate(m)) * Up(m)),  m = RmsNorm(x)
  AddNorm(x, attn_out, M, L.post_norm.data(), a);
  if (sparse) {
    // x = x + Σ_j w_j · Expert_j(m) over the routed experts (model/moe_mlp.h).
    // The routing is counted (moe_stats()) and shown to the hook.
    const MoeRoutingCallback on_routing = [&](const int32_t* experts, const float* weights) {
      moe_stats_.Record(M, DistinctExperts(experts, M * cfg_.moe->top_k));
      if (hook != nullptr) hook->OnRouting(l, row0, experts, weights, M, cfg_.moe->top_k);
    };
    MoeMlp(*ctx_, *cfg_.moe, P, a, M, H, base + moe_at, mlp_out, on_routing);
    for (int64_t i = 0; i < M * H; ++i) x[i] += mlp_out[i];
    return;
  }
  ctx_->MatMul(a, M, H, P.gate_up, gate_up);
  // Items of kSiluCols columns of one row, so one row (decode) splits over the threads too.
  constexpr int64_t kSiluCols = 512;
  const int64_t parts = (I + kSiluCols - 1) / kSiluCols;
  ctx_->pool().ParallelFor(M * parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t m = it / parts, c0 = (it % parts) * kSiluCols, n = std::min(kSiluCols, I - c0);
      float* g = act + m * I + c0;
      std::copy_n(gate_up + m * 2 * I + c0, n, g);
      ctx_->SiluMul(g, gate_up + m * 2 * I + I + c0, n);
    }
  });
  ctx_->MatMul(act, M, I, P.down, mlp_out);
  for (int64_t i = 0; i < M * H; ++i) x[i] += mlp_out[i];
}

void Qwen3Model::AddNorm(float* x, const float* add, int64_t M, const float* weight,
                         float* out) const {
  const int64_t H = cfg_.hidden;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  // One row is about a microsecond: below two rows a wake-up costs more than it saves.
  ctx_->pool().ParallelFor(M, 2, [&](int64_t b, int64_t e) {
    if (add != nullptr) {
      for (int64_t i = b * H; i < e * H; ++i) x[i] += add[i];
    }
    ctx_->RmsNorm(x + b * H, e - b, H, weight, eps, out + b * H);
  });
}

void Qwen3Model::RunLayers(float* x, std::span<const ForwardRow> rows, LayerHook* hook) const {
  for (int l = 0; l < cfg_.layers; ++l) {
    RunLayer(l, x, rows, hook);
    if (hook != nullptr) hook->AfterLayer(l, x, static_cast<int64_t>(rows.size()));
  }
}

void Qwen3Model::FinalNorm(const float* x, int64_t M, float* out) const {
  ctx_->RmsNorm(x, M, cfg_.hidden, weights_.final_norm.data(),
                static_cast<float>(cfg_.rms_norm_eps), out);
}

void Qwen3Model::Logits(const float* h, int64_t M, float* logits) const {
  ctx_->MatMul(h, M, cfg_.hidden, prepared_->lm_head(), logits);
}

}  // namespace vls
