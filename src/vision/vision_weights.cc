#include "vision/vision_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "base/memory.h"
#include "kernels/bf16_blocked.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"

namespace vls {
namespace {

// Looks tensors up by name and checks dtype and shape, collecting every problem so one load
// reports all of them.
class Binder {
 public:
  Binder(const SafetensorsCheckpoint& ckpt, const std::optional<Fp8Quantization>& fp8)
      : ckpt_(ckpt), fp8_(fp8) {}

  // `scales`: the tensor is a Linear weight, which may be FP8; its block scales go there.
  kernels::Matrix Take(const std::string& short_name, const Shape& shape, int64_t rows,
                       int64_t cols, Fp8BlockScales* scales = nullptr) {
    const std::string name = kVisionWeightPrefix + short_name;
    used_.insert(name);
    const SafetensorsCheckpoint::Tensor* scale = nullptr;
    if (scales != nullptr) {
      used_.insert(Fp8ScaleName(name));
      scale = ckpt_.Find(Fp8ScaleName(name));
    }
    const SafetensorsCheckpoint::Tensor* t = ckpt_.Find(name);
    if (t == nullptr) {
      missing_.push_back(name);
      return {};
    }
    const DType dt = t->view.dtype;
    if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16 &&
        !(scales != nullptr && dt == DType::kF8E4M3)) {
      problems_.push_back("tensor '" + name + "' has dtype " + std::string(DTypeName(dt)) +
                          (dt == DType::kF8E4M3
                               ? "; only the Linear weights of the blocks and mergers may be FP8"
                               : "; weights must be F32, BF16 or F16"));
      return {};
    }
    if (t->view.shape != shape) {
      problems_.push_back("tensor '" + name + "' has shape " + ShapeToString(t->view.shape) +
                          " but the vision config requires " + ShapeToString(shape));
      return {};
    }
    if (scales != nullptr) {
      StatusOr<Fp8BlockScales> s =
          BindFp8Scales(fp8_, name, t->view, scale != nullptr ? &scale->view : nullptr);
      if (!s.ok()) {
        problems_.push_back(s.status().message());
        return {};
      }
      *scales = *s;
    }
    return {dt, t->view.data, rows, cols};
  }
  kernels::Matrix Matrix(const std::string& name, int64_t rows, int64_t cols) {
    return Take(name, {rows, cols}, rows, cols);
  }
  kernels::Matrix Vector(const std::string& name, int64_t n) { return Take(name, {n}, 1, n); }
  VisionRawLinear Linear(const std::string& name, int64_t out, int64_t in) {
    VisionRawLinear l;
    l.w = Take(name + ".weight", {out, in}, out, in, &l.w_fp8);
    l.b = Vector(name + ".bias", out);
    return l;
  }
  VisionRawNorm Norm(const std::string& name, int64_t n) {
    return {Vector(name + ".weight", n), Vector(name + ".bias", n)};
  }

  Status Finish() const {
    std::vector<std::string> unexpected;
    const std::string prefix = kVisionWeightPrefix;
    for (const std::string& n : ckpt_.Names()) {
      if (n.rfind(prefix, 0) == 0 && used_.count(n) == 0) unexpected.push_back(n);
    }
    if (missing_.empty() && unexpected.empty() && problems_.empty()) return Status::Ok();
    std::string msg = "vision tower weights do not match the vision config:";
    const auto list = [&msg](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      msg += std::string(" ") + what + " (" + std::to_string(names.size()) + "):";
      for (size_t i = 0; i < names.size() && i < 8; ++i) msg += " " + names[i] + ";";
      if (names.size() > 8) msg += " ...;";
    };
    list("missing", missing_);
    list("unexpected", unexpected);
    list("malformed", problems_);
    if (!missing_.empty() && problems_.empty() && unexpected.empty()) return NotFound(msg);
    return InvalidArgument(msg);
  }

 private:
  const SafetensorsCheckpoint& ckpt_;
  const std::optional<Fp8Quantization>& fp8_;
  std::set<std::string> used_;
  std::vector<std::string> missing_, problems_;
};

constexpr uint64_t kVectorAlign = 64;

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

bool RowsFinite(const kernels::Matrix& src, int64_t r0, int64_t r1, std::vector<float>& row) {
  row.resize(static_cast<size_t>(src.cols));
  for (int64_t r = r0; r < r1; ++r) {
    kernels::LoadRow(src, r, row.data());
    for (float f : row) {
      if (!std::isfinite(f)) return false;
    }
  }
  return true;
}

// Writes rows [r0, r1) of `src` (dense) as rows [dst_row + r0, dst_row + r1) of a matrix of
// `rows` rows in the storage of precision `p` at dst. False when a Q8 source holds a value that
// is not finite (quantization needs a finite block maximum).
bool ConvertRows(kernels::Precision p, const kernels::Matrix& src, int64_t r0, int64_t r1,
                 int64_t rows, int64_t dst_row, std::byte* dst, std::vector<float>& row) {
  switch (p) {
    case kernels::Precision::kBF16:
      kernels::PackBf16Blocked(src, r0, r1, dst, rows, dst_row);
      break;
    case kernels::Precision::kInt8:
    case kernels::Precision::kInt4:  // the vision tower stays at 8 bits (ADR 0019)
      if (!RowsFinite(src, r0, r1, row)) return false;
      kernels::QuantizeQ8(src, r0, r1, dst, rows, dst_row);
      break;
    case kernels::Precision::kF32: {
      const size_t row_bytes = static_cast<size_t>(src.cols) * DTypeSize(src.dtype);
      std::memcpy(dst + static_cast<size_t>(dst_row + r0) * row_bytes,
                  static_cast<const std::byte*>(src.data) + static_cast<size_t>(r0) * row_bytes,
                  static_cast<size_t>(r1 - r0) * row_bytes);
      break;
    }
  }
  return true;
}

// Writes `src` into dst in the storage of precision `p`, over the pool; an FP8 source (`fp8`
// set) is dequantized 64 rows at a time into f32 first. DataLoss (naming the tensor) when a Q8
// source holds a value that is not finite, or an FP8 source a NaN code.
Status Convert(kernels::Precision p, const kernels::Matrix& src, const Fp8BlockScales& fp8,
               const std::string& name, std::byte* dst, const kernels::Context& ctx) {
  const int64_t rows_per_chunk = 64;
  const int64_t chunks = (src.rows + rows_per_chunk - 1) / rows_per_chunk;
  std::atomic<bool> bad{false};
  std::atomic<int64_t> nan_at{-1};  // row * cols + col of a NaN code
  ctx.pool().ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> row, dequantized;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * rows_per_chunk, r1 = std::min(src.rows, r0 + rows_per_chunk);
      if (!fp8.fp8()) {
        if (!ConvertRows(p, src, r0, r1, src.rows, 0, dst, row)) bad.store(true);
        continue;
      }
      dequantized.resize(static_cast<size_t>((r1 - r0) * src.cols));
      int64_t bad_row = 0, bad_col = 0;
      if (!DequantizeFp8Rows(src, fp8, r0, r1, dequantized.data(), &bad_row, &bad_col)) {
        nan_at.store(bad_row * src.cols + bad_col);
        return;
      }
      const kernels::Matrix part{DType::kF32, dequantized.data(), r1 - r0, src.cols};
      if (!ConvertRows(p, part, 0, r1 - r0, src.rows, r0, dst, row)) bad.store(true);
    }
  });
  const std::string tensor = std::string(kVisionWeightPrefix) + name;
  if (const int64_t at = nan_at.load(); at >= 0) {
    return Fp8NaNError(tensor, at / src.cols, at % src.cols);
  }
  if (bad.load()) {
    return DataLoss("tensor '" + tensor +
                    "' holds a value that is not finite; it cannot be quantized to Q8");
  }
  return Status::Ok();
}

// The entry a matrix (or, `vector`, an f32 vector) of `src`'s shape is prepared into.
PreparedEntry EntryFor(const std::string& name, const kernels::Matrix& src, bool vector,
                       kernels::Precision p) {
  PreparedEntry e;
  e.name = name;
  e.rows = src.rows;
  e.cols = src.cols;
  // An FP8 weight is dequantized to F32 (exact, model/fp8_weights.h).
  e.dtype = vector || src.dtype == DType::kF8E4M3 ? DType::kF32 : src.dtype;
  if (!vector && p == kernels::Precision::kBF16) {
    e.format = kernels::MatrixFormat::kBf16Blocked;
    e.dtype = DType::kBF16;
  } else if (!vector && (p == kernels::Precision::kInt8 || p == kernels::Precision::kInt4)) {
    e.format = kernels::MatrixFormat::kQ8;
    e.dtype = DType::kF32;  // as ParsePreparedStorageName reads kQ8StorageName back
  }
  e.bytes = PreparedEntryBytes(e);
  return e;
}

}  // namespace

StatusOr<VisionWeights> BindVisionWeights(const VisionConfig& cfg,
                                          const SafetensorsCheckpoint& ckpt) {
  Binder b(ckpt, cfg.fp8);
  VisionWeights w;
  const int64_t Dv = cfg.hidden, Iv = cfg.intermediate, P = cfg.patch_size;
  const int64_t Md = cfg.merged_dim(), O = cfg.out_hidden;
  w.patch.w = b.Take("patch_embed.proj.weight",
                     {Dv, cfg.in_channels, cfg.temporal_patch_size, P, P}, Dv, cfg.patch_dim());
  w.patch.b = b.Vector("patch_embed.proj.bias", Dv);
  w.pos = b.Matrix("pos_embed.weight", cfg.num_position_embeddings, Dv);
  for (int j = 0; j < cfg.depth; ++j) {
    const std::string p = "blocks." + std::to_string(j) + ".";
    VisionRawBlock blk;
    blk.norm1 = b.Norm(p + "norm1", Dv);
    blk.norm2 = b.Norm(p + "norm2", Dv);
    blk.qkv = b.Linear(p + "attn.qkv", 3 * Dv, Dv);
    blk.proj = b.Linear(p + "attn.proj", Dv, Dv);
    blk.fc1 = b.Linear(p + "mlp.linear_fc1", Iv, Dv);
    blk.fc2 = b.Linear(p + "mlp.linear_fc2", Dv, Iv);
    w.blocks.push_back(blk);
  }
  const auto merger = [&](const std::string& p, int64_t norm_dim) {
    return VisionRawMerger{b.Norm(p + "norm", norm_dim), b.Linear(p + "linear_fc1", Md, Md),
                           b.Linear(p + "linear_fc2", O, Md)};
  };
  w.merger = merger("merger.", Dv);
  for (size_t k = 0; k < cfg.deepstack_visual_indexes.size(); ++k) {
    w.deepstack.push_back(merger("deepstack_merger_list." + std::to_string(k) + ".", Md));
  }
  VLS_RETURN_IF_ERROR(b.Finish());
  return w;
}

std::vector<float> WidenVisionWeight(const VisionRawLinear& l) {
  const kernels::Matrix& m = l.w;
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  if (!l.w_fp8.fp8()) {
    for (int64_t r = 0; r < m.rows; ++r) kernels::LoadRow(m, r, out.data() + r * m.cols);
    return out;
  }
  int64_t bad_row = 0, bad_col = 0;
  if (!DequantizeFp8Rows(m, l.w_fp8, 0, m.rows, out.data(), &bad_row, &bad_col)) {
    // Prepare refuses such a weight; the reference shows it as NaN rather than stopping.
    for (int64_t r = 0; r < m.rows; ++r) {
      for (int64_t c = 0; c < m.cols; ++c) {
        const uint8_t code = static_cast<const uint8_t*>(m.data)[r * m.cols + c];
        out[size_t(r * m.cols + c)] =
            F8E4M3ToF32(code) * l.w_fp8.At(r / l.w_fp8.block_rows, c / l.w_fp8.block_cols);
      }
    }
  }
  return out;
}

// One prepared tensor: where it comes from and the member it binds to (a matrix or a vector).
struct PreparedVisionWeights::Job {
  std::string name;
  const kernels::Matrix* src = nullptr;
  const Fp8BlockScales* fp8 = nullptr;  // a Linear weight's block scales (maybe empty)
  kernels::Matrix* matrix = nullptr;
  const float** vector = nullptr;
};

std::vector<PreparedVisionWeights::Job> PreparedVisionWeights::Jobs(const VisionWeights& w) {
  std::vector<Job> mats, vecs;
  blocks_.resize(w.blocks.size());
  deepstack_.resize(w.deepstack.size());
  const auto linear = [&](const std::string& name, const VisionRawLinear& raw, VisionLinear* out) {
    mats.push_back({name + ".weight", &raw.w, &raw.w_fp8, &out->w, nullptr});
    vecs.push_back({name + ".bias", &raw.b, nullptr, nullptr, &out->b});
  };
  const auto norm = [&](const std::string& name, const VisionRawNorm& raw, VisionNorm* out) {
    vecs.push_back({name + ".weight", &raw.w, nullptr, nullptr, &out->w});
    vecs.push_back({name + ".bias", &raw.b, nullptr, nullptr, &out->b});
  };
  const auto merger = [&](const std::string& name, const VisionRawMerger& raw, VisionMerger* out) {
    norm(name + "norm", raw.norm, &out->norm);
    linear(name + "linear_fc1", raw.fc1, &out->fc1);
    linear(name + "linear_fc2", raw.fc2, &out->fc2);
  };
  linear("patch_embed.proj", w.patch, &patch_);
  vecs.push_back({"pos_embed.weight", &w.pos, nullptr, nullptr, &pos_});
  for (size_t j = 0; j < w.blocks.size(); ++j) {
    const std::string name = "blocks." + std::to_string(j) + ".";
    const VisionRawBlock& raw = w.blocks[j];
    VisionBlock& out = blocks_[j];
    norm(name + "norm1", raw.norm1, &out.norm1);
    norm(name + "norm2", raw.norm2, &out.norm2);
    linear(name + "attn.qkv", raw.qkv, &out.qkv);
    linear(name + "attn.proj", raw.proj, &out.proj);
    linear(name + "mlp.linear_fc1", raw.fc1, &out.fc1);
    linear(name + "mlp.linear_fc2", raw.fc2, &out.fc2);
  }
  merger("merger.", w.merger, &merger_);
  for (size_t k = 0; k < w.deepstack.size(); ++k) {
    merger("deepstack_merger_list." + std::to_string(k) + ".", w.deepstack[k], &deepstack_[k]);
  }
  mats.insert(mats.end(), vecs.begin(), vecs.end());
  return mats;
}

std::vector<PreparedEntry> PlanPreparedVisionEntries(const VisionWeights& w,
                                                     kernels::Precision precision) {
  PreparedVisionWeights scratch;
  std::vector<PreparedEntry> out;
  uint64_t offset = 0;
  for (const PreparedVisionWeights::Job& j : scratch.Jobs(w)) {
    const bool vector = j.vector != nullptr;
    PreparedEntry e = EntryFor(j.name, *j.src, vector, precision);
    e.offset = AlignUp(offset, vector ? kVectorAlign : kPreparedAlign);
    offset = e.offset + e.bytes;
    out.push_back(std::move(e));
  }
  return out;
}

std::string PreparedVisionLayoutText(const std::vector<PreparedEntry>& entries) {
  std::ostringstream o;
  for (const PreparedEntry& e : entries) {
    o << "visual." << e.name << ' ' << PreparedStorageName(e) << " [" << e.rows << ", " << e.cols
      << "] @" << e.offset << '\n';
  }
  return o.str();
}

Status CheckPreparedVisionLayout(const std::vector<PreparedEntry>& have,
                                 const std::vector<PreparedEntry>& want, const std::string& what) {
  if (have.size() != want.size()) {
    return InvalidArgument(what + " has " + std::to_string(have.size()) +
                           " prepared vision tensors; this vision tower needs " +
                           std::to_string(want.size()));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const PreparedEntry& a = have[i];
    const PreparedEntry& b = want[i];
    if (a.name != b.name || a.dtype != b.dtype || a.format != b.format || a.rows != b.rows ||
        a.cols != b.cols || a.offset != b.offset || a.bytes != b.bytes) {
      return InvalidArgument(what + ": prepared vision tensor " + std::to_string(i) + " ('" +
                             a.name + "' " + PreparedStorageName(a) + " [" +
                             std::to_string(a.rows) + ", " + std::to_string(a.cols) + "] @" +
                             std::to_string(a.offset) +
                             ") does not match this vision tower's layout (expected '" + b.name +
                             "' " + PreparedStorageName(b) + " [" + std::to_string(b.rows) + ", " +
                             std::to_string(b.cols) + "] @" + std::to_string(b.offset) + ")");
    }
  }
  return Status::Ok();
}

void PreparedVisionWeights::Bind(const std::vector<Job>& jobs) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PreparedEntry& e = region_.entries[i];
    const std::byte* at = region_.data + e.offset;
    if (jobs[i].vector != nullptr) {
      *jobs[i].vector = reinterpret_cast<const float*>(at);
      continue;
    }
    switch (e.format) {
      case kernels::MatrixFormat::kBf16Blocked:
        *jobs[i].matrix = kernels::Bf16BlockedMatrixAt(at, e.rows, e.cols);
        break;
      case kernels::MatrixFormat::kQ8:
        *jobs[i].matrix = kernels::Q8MatrixAt(at, e.rows, e.cols);
        break;
      case kernels::MatrixFormat::kQ4:  // never planned for the tower (it stays at Q8)
        *jobs[i].matrix = kernels::Q4MatrixAt(at, e.rows, e.cols);
        break;
      case kernels::MatrixFormat::kQ6:  // never planned for the tower either
        *jobs[i].matrix = kernels::Q6MatrixAt(at, e.rows, e.cols);
        break;
      case kernels::MatrixFormat::kDense:
        *jobs[i].matrix = kernels::Matrix{e.dtype, at, e.rows, e.cols};
        break;
    }
  }
}

StatusOr<std::unique_ptr<PreparedVisionWeights>> PreparedVisionWeights::Prepare(
    const VisionConfig& /*cfg*/, const VisionWeights& w, const kernels::Context& ctx,
    bool release_source_pages) {
  std::unique_ptr<PreparedVisionWeights> pw(new PreparedVisionWeights());
  const kernels::Precision p = ctx.precision();
  const std::vector<Job> jobs = pw->Jobs(w);
  std::vector<PreparedEntry> plan = PlanPreparedVisionEntries(w, p);
  const uint64_t size = plan.empty() ? 0 : plan.back().offset + plan.back().bytes;
  VLS_ASSIGN_OR_RETURN(pw->owned_, HugeRegion::Allocate(std::max<uint64_t>(size, kPreparedAlign)));
  std::byte* base = pw->owned_->data();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const kernels::Matrix& src = *jobs[i].src;
    std::byte* at = base + plan[i].offset;
    if (jobs[i].vector != nullptr) {
      auto* out = reinterpret_cast<float*>(at);
      for (int64_t r = 0; r < src.rows; ++r) kernels::LoadRow(src, r, out + r * src.cols);
    } else {
      VLS_RETURN_IF_ERROR(Convert(p, src, *jobs[i].fp8, jobs[i].name, at, ctx));
    }
    if (release_source_pages && src.data != nullptr) {
      ReleaseFilePages(src.data, static_cast<size_t>(src.rows) * static_cast<size_t>(src.cols) *
                                     DTypeSize(src.dtype));
    }
  }
  (void)pw->owned_->Collapse();  // pages faulted in while memory was fragmented
  pw->region_.entries = std::move(plan);
  pw->region_.data = base;
  pw->region_.size = size;
  pw->Bind(jobs);
  return pw;
}

StatusOr<std::unique_ptr<PreparedVisionWeights>> PreparedVisionWeights::FromRegion(
    const VisionWeights& w, kernels::Precision precision, PreparedRegion region,
    const std::string& what) {
  const std::vector<PreparedEntry> plan = PlanPreparedVisionEntries(w, precision);
  VLS_RETURN_IF_ERROR(CheckPreparedVisionLayout(region.entries, plan, what));
  const uint64_t end = plan.empty() ? 0 : plan.back().offset + plan.back().bytes;
  if (end > region.size || region.data == nullptr ||
      reinterpret_cast<uintptr_t>(region.data) % kVectorAlign != 0) {
    return InvalidArgument(what + ": the prepared vision weights need " + std::to_string(end) +
                           " aligned bytes but the region holds " + std::to_string(region.size));
  }
  std::unique_ptr<PreparedVisionWeights> pw(new PreparedVisionWeights());
  const std::vector<Job> jobs = pw->Jobs(w);
  pw->region_ = std::move(region);
  pw->Bind(jobs);
  return pw;
}

uint64_t PreparedVisionWeights::bytes() const {
  uint64_t n = 0;
  for (const PreparedEntry& e : region_.entries) n += e.bytes;
  return n;
}

std::string PreparedVisionWeights::LayoutText() const {
  return PreparedVisionLayoutText(region_.entries);
}

}  // namespace vls
