#include "model/prepared_weights.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "kernels/bf16_blocked.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "model/weight_check.h"
#include "tensor/dtype.h"

namespace vls {

namespace {

// One prepared matrix and the checkpoint matrices stacked into it, in row order (with the
// names of their tensors, for errors).
struct Group {
  PreparedEntry entry;
  std::vector<WeightMatrix> sources;
  std::vector<std::string> names;
  // An expert of the fused layout: the one source is a [K, N] block of rows of the stored
  // tensor (starting at its row `source_row0`, for errors) and the entry [N, K] its transpose.
  bool transpose = false;
  int64_t source_row0 = 0;
};

// How Plan's `add` reads its sources.
enum class SourceKind {
  kStacked,     // the sources' rows, stacked, in the precision's storage
  kTransposed,  // one fused-layout block, transposed (Group::transpose)
  kF32,         // the sources' rows widened to dense F32 in every precision (the router)
};

// The dtype a source is stored in at kF32: its own, except FP8, which is dequantized to F32
// (the product of an E4M3 value and its scale needs up to 15 significant bits; F32 holds it
// exactly, BF16 and F16 do not).
DType DenseDType(const WeightMatrix& m) { return m.fp8.fp8() ? DType::kF32 : m.m.dtype; }

DType StorageDType(kernels::Precision p, const std::vector<WeightMatrix>& sources) {
  if (p == kernels::Precision::kBF16) return DType::kBF16;
  // Unused for Q8; F32 is what ParsePreparedStorageName reads kQ8StorageName back as, so an
  // artifact's entries compare equal to the plan whatever the checkpoint's dtype.
  if (p == kernels::Precision::kInt8 || p == kernels::Precision::kInt4) return DType::kF32;
  for (const WeightMatrix& m : sources) {
    if (DenseDType(m) != DenseDType(sources.front())) return DType::kF32;
  }
  return DenseDType(sources.front());
}

// The address of row `r` of `m` (a dense matrix; null when m is unbound).
const void* BlockRows(const kernels::Matrix& m, int64_t r) {
  if (m.data == nullptr) return nullptr;
  return static_cast<const std::byte*>(m.data) +
         static_cast<size_t>(r) * static_cast<size_t>(m.cols) * DTypeSize(m.dtype);
}

std::vector<Group> Plan(const Qwen3Config& cfg, const Qwen3Weights& w, kernels::Precision p) {
  std::vector<Group> groups;
  auto add = [&](std::string name, std::vector<WeightMatrix> sources,
                 std::vector<std::string> names, SourceKind kind = SourceKind::kStacked,
                 int64_t source_row0 = 0) {
    Group g;
    g.entry.name = std::move(name);
    g.entry.dtype = StorageDType(p, sources);
    if (p == kernels::Precision::kInt8) g.entry.format = kernels::MatrixFormat::kQ8;
    if (p == kernels::Precision::kBF16) g.entry.format = kernels::MatrixFormat::kBf16Blocked;
    g.entry.cols = sources.front().m.cols;
    for (const WeightMatrix& m : sources) g.entry.rows += m.m.rows;
    if (kind == SourceKind::kTransposed) {
      g.entry.rows = sources.front().m.cols;
      g.entry.cols = sources.front().m.rows;
      g.transpose = true;
      g.source_row0 = source_row0;
    }
    if (kind == SourceKind::kF32) {
      g.entry.dtype = DType::kF32;
      g.entry.format = kernels::MatrixFormat::kDense;
    } else if (p == kernels::Precision::kInt4) {
      // The LM head at 6 bits (ADR 0021: measured KL), any matrix Q4 or Q6 cannot hold at 8.
      const bool head = g.entry.name == "lm_head";
      const bool fits = head ? kernels::Q6Supports(g.entry.rows, g.entry.cols)
                             : kernels::Q4Supports(g.entry.rows, g.entry.cols);
      g.entry.format = !fits  ? kernels::MatrixFormat::kQ8
                       : head ? kernels::MatrixFormat::kQ6
                              : kernels::MatrixFormat::kQ4;
    }
    g.sources = std::move(sources);
    g.names = std::move(names);
    groups.push_back(std::move(g));
  };
  const std::string& wp = cfg.weight_prefix;
  for (int l = 0; l < cfg.layers; ++l) {
    const Qwen3LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string lp = "layers." + std::to_string(l) + ".";
    const std::string tp = wp + lp;  // the tensors' names
    add(lp + "qkv", {L.q, L.k, L.v},
        {tp + "self_attn.q_proj.weight", tp + "self_attn.k_proj.weight",
         tp + "self_attn.v_proj.weight"});
    add(lp + "o", {L.o}, {tp + "self_attn.o_proj.weight"});
    if (!cfg.IsSparseLayer(l)) {
      add(lp + "gate_up", {L.gate, L.up}, {tp + "mlp.gate_proj.weight", tp + "mlp.up_proj.weight"});
      add(lp + "down", {L.down}, {tp + "mlp.down_proj.weight"});
      continue;
    }
    add(lp + "router", {L.router}, {tp + "mlp.gate.weight"}, SourceKind::kF32);
    const int64_t E = cfg.moe->experts, H = cfg.hidden, I = cfg.moe->expert_intermediate;
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = lp + "experts." + std::to_string(e) + ".";
      if (cfg.moe->layout == MoeLayout::kPerExpert) {
        const auto i = static_cast<size_t>(e);
        const std::string te = tp + "mlp.experts." + std::to_string(e) + ".";
        add(ep + "gate_up", {L.expert_gate[i], L.expert_up[i]},
            {te + "gate_proj.weight", te + "up_proj.weight"});
        add(ep + "down", {L.expert_down[i]}, {te + "down_proj.weight"});
        continue;
      }
      // Expert e's blocks of the fused tensors: rows [e·H, (e+1)·H) of gate_up [E·H, 2·I],
      // rows [e·I, (e+1)·I) of down [E·I, H] (qwen3_weights.h).
      const kernels::Matrix& fgu = L.fused_gate_up;
      const kernels::Matrix& fd = L.fused_down;
      const WeightMatrix gu{{fgu.dtype, BlockRows(fgu, e * H), H, 2 * I}, {}};
      const WeightMatrix dn{{fd.dtype, BlockRows(fd, e * I), I, H}, {}};
      add(ep + "gate_up", {gu}, {tp + "mlp.experts.gate_up_proj"}, SourceKind::kTransposed, e * H);
      add(ep + "down", {dn}, {tp + "mlp.experts.down_proj"}, SourceKind::kTransposed, e * I);
    }
  }
  add("lm_head", {w.lm_head}, {cfg.tied ? wp + "embed_tokens.weight" : "lm_head.weight"});
  uint64_t offset = 0;
  for (Group& g : groups) {
    g.entry.offset = offset;
    g.entry.bytes = PreparedEntryBytes(g.entry);
    offset += (g.entry.bytes + kPreparedAlign - 1) / kPreparedAlign * kPreparedAlign;
  }
  return groups;
}

// dst rows [r0, r1) of `src`, converted to `dt` (bytes copied when the dtype already matches).
void ConvertRows(const kernels::Matrix& src, int64_t r0, int64_t r1, DType dt, std::byte* dst) {
  const size_t in_row = static_cast<size_t>(src.cols) * DTypeSize(src.dtype);
  const size_t out_row = static_cast<size_t>(src.cols) * DTypeSize(dt);
  if (src.dtype == dt) {
    std::memcpy(dst + static_cast<size_t>(r0) * out_row,
                static_cast<const std::byte*>(src.data) + static_cast<size_t>(r0) * in_row,
                static_cast<size_t>(r1 - r0) * in_row);
    return;
  }
  std::vector<float> row(static_cast<size_t>(src.cols));
  for (int64_t r = r0; r < r1; ++r) {
    kernels::LoadRow(src, r, row.data());
    std::byte* out = dst + static_cast<size_t>(r) * out_row;
    for (int64_t c = 0; c < src.cols; ++c) {
      const float f = row[static_cast<size_t>(c)];
      if (dt == DType::kF32) {
        std::memcpy(out + c * 4, &f, 4);
      } else {
        const uint16_t h = dt == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
        std::memcpy(out + c * 2, &h, 2);
      }
    }
  }
}

// Converts or quantizes rows [r0, r1) of `src` (a dense matrix) into rows [dst_row + r0,
// dst_row + r1) of the entry `e` at `dst`.
void FillRows(const PreparedEntry& e, const kernels::Matrix& src, int64_t r0, int64_t r1,
              int64_t dst_row, std::byte* dst) {
  if (e.format == kernels::MatrixFormat::kQ8) {
    kernels::QuantizeQ8(src, r0, r1, dst, e.rows, dst_row);
  } else if (e.format == kernels::MatrixFormat::kQ4) {
    kernels::QuantizeQ4(src, r0, r1, dst, e.rows, dst_row);
  } else if (e.format == kernels::MatrixFormat::kQ6) {
    kernels::QuantizeQ6(src, r0, r1, dst, e.rows, dst_row);
  } else if (e.format == kernels::MatrixFormat::kBf16Blocked) {
    kernels::PackBf16Blocked(src, r0, r1, dst, e.rows, dst_row);
  } else {
    const size_t row_bytes = static_cast<size_t>(e.cols) * DTypeSize(e.dtype);
    ConvertRows(src, r0, r1, e.dtype, dst + static_cast<size_t>(dst_row) * row_bytes);
  }
}

// Converts or quantizes every source of `g` into `dst` (the entry's place in the region). An
// FP8 source is dequantized chunk by chunk into the participant's f32 buffer of `buffers` (one
// per pool participant, about 4 MiB, reused across entries) that then takes the dense path, so
// no whole dequantized matrix ever exists; DataLoss for a NaN code. With `check_finite`, each
// chunk (dequantized, for FP8) is scanned for NaN and infinite weights right before it is
// converted, while its pages are resident: the check adds no pass over the file.
// out[(n1 - n0), K] = columns [n0, n1) of src[K, N], transposed, widened to f32. Read in
// tiles of kTileRows source rows, each a contiguous run of each row, so both sides stay in
// cache (a column-at-a-time read would touch one cache line per element).
void TransposeColumns(const kernels::Matrix& src, int64_t n0, int64_t n1, float* out) {
  constexpr int64_t kTileRows = 32;
  const int64_t K = src.rows, W = n1 - n0;
  const size_t src_row = static_cast<size_t>(src.cols) * DTypeSize(src.dtype);
  std::vector<float> tile(static_cast<size_t>(kTileRows * W));  // [kTileRows, W]
  for (int64_t k0 = 0; k0 < K; k0 += kTileRows) {
    const int64_t k1 = std::min(K, k0 + kTileRows);
    for (int64_t k = k0; k < k1; ++k) {
      const kernels::Matrix run{src.dtype,
                                static_cast<const std::byte*>(src.data) +
                                    static_cast<size_t>(k) * src_row +
                                    static_cast<size_t>(n0) * DTypeSize(src.dtype),
                                1, W};
      kernels::LoadRow(run, 0, tile.data() + (k - k0) * W);
    }
    for (int64_t n = 0; n < W; ++n) {
      float* o = out + n * K;
      for (int64_t k = k0; k < k1; ++k) o[k] = tile[static_cast<size_t>((k - k0) * W + n)];
    }
  }
}

// Rows per conversion chunk of a source of `rows` rows: at most `max_rows` (about 4 MiB) and
// at most a quarter of the rows per pool participant, so that a source of a few MiB (one
// expert of a MoE model, ADR 0027) still spreads over every thread; a multiple of 64 rows (the
// BF16 blocked tile height, and a whole number of Q4 row groups) unless it is the whole source.
int64_t BalancedChunkRows(int64_t rows, int64_t max_rows, const kernels::Context& ctx) {
  const int64_t parts = 4 * static_cast<int64_t>(ctx.pool().threads());
  const int64_t balanced = ((rows + parts - 1) / parts + 63) / 64 * 64;
  return std::max<int64_t>(1, std::min(max_rows, balanced));
}

// FillEntry for a transposed group (one expert of the fused layout): output rows in chunks of
// about 4 MiB of f32, each transposed into the participant's buffer and then converted as a
// dense source; the block's file pages are released once the whole expert is done (every
// chunk reads all of its rows). With `check_finite` the block is scanned first.
Status FillTransposed(const Group& g, std::byte* dst, const kernels::Context& ctx,
                      std::vector<std::vector<float>>& buffers, bool check_finite) {
  const kernels::Matrix& src = g.sources.front().m;  // [K, N]; the entry is [N, K]
  const int64_t K = src.rows, N = src.cols;
  const size_t src_row = static_cast<size_t>(N) * DTypeSize(src.dtype);
  if (check_finite) {
    if (auto bad = FindNonFinite(src.dtype, src.data, K * N)) {
      bad->index += g.source_row0 * N;
      return NonFiniteWeightError(g.names.front(), *bad, N);
    }
  }
  const int64_t rows_per_chunk = BalancedChunkRows(
      N, static_cast<int64_t>((size_t{4} << 20) / (static_cast<size_t>(K) * 4)), ctx);
  const int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  ctx.pool().ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1, int thread) {
    std::vector<float>& t = buffers[static_cast<size_t>(thread)];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t n0 = c * rows_per_chunk, n1 = std::min(N, n0 + rows_per_chunk);
      t.resize(static_cast<size_t>((n1 - n0) * K));
      TransposeColumns(src, n0, n1, t.data());
      const kernels::Matrix part{DType::kF32, t.data(), n1 - n0, K};
      FillRows(g.entry, part, 0, n1 - n0, n0, dst);
    }
  });
  ReleaseFilePages(src.data, static_cast<size_t>(K) * src_row);
  return Status::Ok();
}

Status FillEntry(const Group& g, std::byte* dst, const kernels::Context& ctx,
                 std::vector<std::vector<float>>& buffers, bool check_finite) {
  if (g.transpose) return FillTransposed(g, dst, ctx, buffers, check_finite);
  int64_t row = 0;  // the first stacked row of the current source
  for (size_t i = 0; i < g.sources.size(); ++i) {
    const kernels::Matrix& src = g.sources[i].m;
    const Fp8BlockScales& fp8 = g.sources[i].fp8;
    const size_t src_row = static_cast<size_t>(src.cols) * DTypeSize(src.dtype);
    // Rows are converted in chunks of about 4 MiB of source (of f32 for an FP8 source) and
    // each chunk's file pages are dropped right after, so only a few chunks of the source are
    // resident beside the prepared copy. (Each release is a TLB shootdown across cores, so not
    // per row.) The embedding rows of a tied head are faulted back in on lookup.
    const size_t chunk_row = fp8.fp8() ? static_cast<size_t>(src.cols) * 4 : src_row;
    const int64_t rows_per_chunk = BalancedChunkRows(
        src.rows, static_cast<int64_t>((size_t{4} << 20) / std::max<size_t>(1, chunk_row)), ctx);
    const int64_t chunks = (src.rows + rows_per_chunk - 1) / rows_per_chunk;
    std::mutex mu;
    std::optional<Status> failure;               // the first NaN code found
    std::optional<NonFiniteElement> non_finite;  // the lowest non-finite element found
    auto found = [&](NonFiniteElement e, int64_t r0) {
      e.index += r0 * src.cols;
      const std::lock_guard<std::mutex> lock(mu);
      if (!non_finite || e.index < non_finite->index) non_finite = e;
    };
    ctx.pool().ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1, int thread) {
      std::vector<float>& dequantized = buffers[static_cast<size_t>(thread)];  // [rows, cols]
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t r0 = c * rows_per_chunk, r1 = std::min(src.rows, r0 + rows_per_chunk);
        if (fp8.fp8()) {
          dequantized.resize(static_cast<size_t>((r1 - r0) * src.cols));
          int64_t bad_row = 0, bad_col = 0;
          if (!DequantizeFp8Rows(src, fp8, r0, r1, dequantized.data(), &bad_row, &bad_col)) {
            const std::lock_guard<std::mutex> lock(mu);
            if (!failure) failure = Fp8NaNError(g.names[i], bad_row, bad_col);
            return;
          }
          if (check_finite) {
            if (auto bad = FindNonFinite(DType::kF32, dequantized.data(), (r1 - r0) * src.cols)) {
              return found(*bad, r0);
            }
          }
          const kernels::Matrix part{DType::kF32, dequantized.data(), r1 - r0, src.cols};
          FillRows(g.entry, part, 0, r1 - r0, row + r0, dst);
        } else {
          if (check_finite) {
            const std::byte* p = static_cast<const std::byte*>(src.data) + r0 * src_row;
            if (auto bad = FindNonFinite(src.dtype, p, (r1 - r0) * src.cols)) {
              return found(*bad, r0);
            }
          }
          FillRows(g.entry, src, r0, r1, row, dst);
        }
        ReleaseFilePages(static_cast<const std::byte*>(src.data) + r0 * src_row,
                         static_cast<size_t>(r1 - r0) * src_row);
      }
    });
    if (failure) return *failure;
    if (non_finite) return NonFiniteWeightError(g.names[i], *non_finite, src.cols);
    ReleaseFilePages(src.data, static_cast<size_t>(src.rows) * src_row);
    row += src.rows;
  }
  return Status::Ok();
}

}  // namespace

static_assert(kernels::kQ8Block == 32, "kQ8StorageName names the Q8 block size");

const char* PreparedQ8OldLayout(const std::string& name) {
  if (name == "Q8") return "int8 in 128-column blocks";
  if (name == "Q8B32") return "int8 in 32-column blocks with f32 scales and weight sums";
  return nullptr;
}

std::string PreparedStorageName(const PreparedEntry& e) {
  if (e.format == kernels::MatrixFormat::kQ8) return kQ8StorageName;
  if (e.format == kernels::MatrixFormat::kQ4) return "Q4";
  if (e.format == kernels::MatrixFormat::kQ6) return "Q6";
  if (e.format == kernels::MatrixFormat::kBf16Blocked) return "BF16_BLOCKED";
  return std::string(DTypeName(e.dtype));
}

bool ParsePreparedStorageName(const std::string& name, PreparedEntry* e) {
  if (name == kQ8StorageName) {
    e->format = kernels::MatrixFormat::kQ8;
    e->dtype = DType::kF32;
    return true;
  }
  if (name == "Q4") {
    e->format = kernels::MatrixFormat::kQ4;
    e->dtype = DType::kF32;
    return true;
  }
  if (name == "Q6") {
    e->format = kernels::MatrixFormat::kQ6;
    e->dtype = DType::kF32;
    return true;
  }
  if (name == "BF16_BLOCKED") {
    e->format = kernels::MatrixFormat::kBf16Blocked;
    e->dtype = DType::kBF16;
    return true;
  }
  e->format = kernels::MatrixFormat::kDense;
  return ParseDTypeName(name, &e->dtype) && e->dtype != DType::kI32;
}

uint64_t PreparedEntryBytes(const PreparedEntry& e) {
  if (e.format == kernels::MatrixFormat::kQ8) {
    return static_cast<uint64_t>(kernels::Q8LayoutFor(e.rows, e.cols).bytes);
  }
  if (e.format == kernels::MatrixFormat::kQ4) {
    if (!kernels::Q4Supports(e.rows, e.cols)) return 0;  // never planned; refused when bound
    return static_cast<uint64_t>(kernels::Q4Bytes(e.rows, e.cols));
  }
  if (e.format == kernels::MatrixFormat::kQ6) {
    if (!kernels::Q6Supports(e.rows, e.cols)) return 0;  // never planned; refused when bound
    return static_cast<uint64_t>(kernels::Q6Bytes(e.rows, e.cols));
  }
  if (e.format == kernels::MatrixFormat::kBf16Blocked) {
    return static_cast<uint64_t>(kernels::Bf16BlockedBytes(e.rows, e.cols));
  }
  return static_cast<uint64_t>(e.rows * e.cols) * DTypeSize(e.dtype);
}

std::vector<PreparedEntry> PlanPreparedEntries(const Qwen3Config& cfg, const Qwen3Weights& w,
                                               kernels::Precision precision) {
  std::vector<PreparedEntry> out;
  for (const Group& g : Plan(cfg, w, precision)) out.push_back(g.entry);
  return out;
}

PreparedBytes CountPreparedBytes(const Qwen3Config& cfg,
                                 const std::vector<PreparedEntry>& entries) {
  PreparedBytes b;
  for (const PreparedEntry& e : entries) {
    b.total += e.bytes;
    if (e.name.find(".experts.") == std::string::npos) {
      b.active_per_token += e.bytes;
      continue;
    }
    b.experts += e.bytes;
    if (cfg.moe) {
      // A share of one expert matrix, rounded down (bytes < 2^37, k <= 64: no overflow).
      b.active_per_token +=
          e.bytes * static_cast<uint64_t>(cfg.moe->top_k) / static_cast<uint64_t>(cfg.moe->experts);
    }
  }
  return b;
}

StatusOr<std::unique_ptr<PreparedWeights>> PreparedWeights::Prepare(const Qwen3Config& cfg,
                                                                    const Qwen3Weights& w,
                                                                    const kernels::Context& ctx,
                                                                    const PrepareProgress& progress,
                                                                    bool check_finite) {
  std::vector<Group> groups = Plan(cfg, w, ctx.precision());
  const PreparedEntry& last = groups.back().entry;
  std::unique_ptr<PreparedWeights> pw(new PreparedWeights());
  VLS_ASSIGN_OR_RETURN(pw->region_, HugeRegion::Allocate(last.offset + last.bytes));
  pw->data_ = pw->region_->data();
  pw->size_ = last.offset + last.bytes;
  const int total = static_cast<int>(groups.size());
  std::vector<std::vector<float>> buffers(static_cast<size_t>(ctx.pool().threads()));
  for (int i = 0; i < total; ++i) {
    const Group& g = groups[static_cast<size_t>(i)];
    VLS_RETURN_IF_ERROR(
        FillEntry(g, pw->region_->data() + g.entry.offset, ctx, buffers, check_finite));
    pw->entries_.push_back(g.entry);
    if (progress) progress(i + 1, total);
  }
  // Pages written while the checkpoint's page cache had fragmented memory may be 4 KiB ones.
  (void)pw->region_->Collapse();
  VLS_RETURN_IF_ERROR(pw->BindEntries(cfg));
  return pw;
}

uint64_t PreparedWeights::HugePageBytes() const {
  if (region_ != nullptr) return region_->HugePageBytes();
  return artifact_copy_ != nullptr ? artifact_copy_->HugePageBytes() : 0;
}

Status PreparedWeights::BindEntries(const Qwen3Config& cfg) {
  // A MoE model has thousands of entries (48 layers × 128 experts × 2): look them up by name.
  std::unordered_map<std::string_view, const PreparedEntry*> by_name;
  by_name.reserve(entries_.size());
  for (const PreparedEntry& e : entries_) by_name.emplace(e.name, &e);
  auto find = [this, &by_name](const std::string& name, kernels::Matrix* out) -> Status {
    if (const auto it = by_name.find(name); it != by_name.end()) {
      const PreparedEntry& e = *it->second;
      if (e.offset % kPreparedAlign != 0 || e.offset > size_ || e.bytes > size_ - e.offset ||
          e.rows <= 0 || e.cols <= 0 || e.bytes != PreparedEntryBytes(e)) {
        return InvalidArgument("prepared weight '" + name + "' lies outside its region");
      }
      switch (e.format) {
        case kernels::MatrixFormat::kQ8:
          *out = kernels::Q8MatrixAt(data_ + e.offset, e.rows, e.cols);
          break;
        case kernels::MatrixFormat::kQ4:
          *out = kernels::Q4MatrixAt(data_ + e.offset, e.rows, e.cols);
          break;
        case kernels::MatrixFormat::kQ6:
          *out = kernels::Q6MatrixAt(data_ + e.offset, e.rows, e.cols);
          break;
        case kernels::MatrixFormat::kBf16Blocked:
          *out = kernels::Bf16BlockedMatrixAt(data_ + e.offset, e.rows, e.cols);
          break;
        case kernels::MatrixFormat::kDense:
          *out = kernels::Matrix{e.dtype, data_ + e.offset, e.rows, e.cols};
          break;
      }
      return Status::Ok();
    }
    return InvalidArgument("prepared weights lack '" + name + "'");
  };
  layers_.resize(static_cast<size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string lp = "layers." + std::to_string(l) + ".";
    PreparedLayer& L = layers_[static_cast<size_t>(l)];
    VLS_RETURN_IF_ERROR(find(lp + "qkv", &L.qkv));
    VLS_RETURN_IF_ERROR(find(lp + "o", &L.o));
    if (!cfg.IsSparseLayer(l)) {
      VLS_RETURN_IF_ERROR(find(lp + "gate_up", &L.gate_up));
      VLS_RETURN_IF_ERROR(find(lp + "down", &L.down));
      continue;
    }
    VLS_RETURN_IF_ERROR(find(lp + "router", &L.router));
    const auto E = static_cast<size_t>(cfg.moe->experts);
    L.expert_gate_up.resize(E);
    L.expert_down.resize(E);
    for (size_t e = 0; e < E; ++e) {
      const std::string ep = lp + "experts." + std::to_string(e) + ".";
      VLS_RETURN_IF_ERROR(find(ep + "gate_up", &L.expert_gate_up[e]));
      VLS_RETURN_IF_ERROR(find(ep + "down", &L.expert_down[e]));
    }
  }
  return find("lm_head", &lm_head_);
}

std::string PreparedWeights::LayoutText() const {
  std::ostringstream o;
  for (const PreparedEntry& e : entries_) {
    o << e.name << " " << PreparedStorageName(e) << " [" << e.rows << ", " << e.cols << "] @"
      << e.offset << "\n";
  }
  return o.str();
}

}  // namespace vls
