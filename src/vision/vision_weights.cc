#include "vision/vision_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "kernels/bf16_blocked.h"
#include "kernels/quant.h"

namespace vls {
namespace {

// Looks tensors up by name and checks dtype and shape, collecting every problem so one load
// reports all of them.
class Binder {
 public:
  explicit Binder(const SafetensorsCheckpoint& ckpt) : ckpt_(ckpt) {}

  kernels::Matrix Take(const std::string& short_name, const Shape& shape, int64_t rows,
                       int64_t cols) {
    const std::string name = kVisionWeightPrefix + short_name;
    used_.insert(name);
    const SafetensorsCheckpoint::Tensor* t = ckpt_.Find(name);
    if (t == nullptr) {
      missing_.push_back(name);
      return {};
    }
    const DType dt = t->view.dtype;
    if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16) {
      problems_.push_back("tensor '" + name + "' has dtype " + std::string(DTypeName(dt)) +
                          "; weights must be F32, BF16 or F16");
      return {};
    }
    if (t->view.shape != shape) {
      problems_.push_back("tensor '" + name + "' has shape " + ShapeToString(t->view.shape) +
                          " but the vision config requires " + ShapeToString(shape));
      return {};
    }
    return {dt, t->view.data, rows, cols};
  }
  kernels::Matrix Matrix(const std::string& name, int64_t rows, int64_t cols) {
    return Take(name, {rows, cols}, rows, cols);
  }
  kernels::Matrix Vector(const std::string& name, int64_t n) { return Take(name, {n}, 1, n); }
  VisionRawLinear Linear(const std::string& name, int64_t out, int64_t in) {
    return {Matrix(name + ".weight", out, in), Vector(name + ".bias", out)};
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
  std::set<std::string> used_;
  std::vector<std::string> missing_, problems_;
};

constexpr uint64_t kAlign = 4096;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string StorageName(const kernels::Matrix& m) {
  if (m.format == kernels::MatrixFormat::kQ8) return "Q8";
  if (m.format == kernels::MatrixFormat::kBf16Blocked) return "BF16_BLOCKED";
  return std::string(DTypeName(m.dtype));
}

uint64_t StorageBytes(kernels::Precision p, const kernels::Matrix& src) {
  switch (p) {
    case kernels::Precision::kBF16:
      return static_cast<uint64_t>(kernels::Bf16BlockedBytes(src.rows, src.cols));
    case kernels::Precision::kInt8:
      return static_cast<uint64_t>(kernels::Q8LayoutFor(src.rows, src.cols).bytes);
    case kernels::Precision::kF32: break;
  }
  return static_cast<uint64_t>(src.rows * src.cols) * DTypeSize(src.dtype);
}

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

// Writes `src` into dst in the storage of precision `p`, over the pool. DataLoss (naming the
// tensor) when a Q8 source holds a value that is not finite (quantization needs a finite
// block maximum).
Status Convert(kernels::Precision p, const kernels::Matrix& src, const std::string& name,
               std::byte* dst, const kernels::Context& ctx) {
  const int64_t rows_per_chunk = 64;
  const int64_t chunks = (src.rows + rows_per_chunk - 1) / rows_per_chunk;
  std::atomic<bool> bad{false};
  ctx.pool().ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> row;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * rows_per_chunk, r1 = std::min(src.rows, r0 + rows_per_chunk);
      switch (p) {
        case kernels::Precision::kBF16:
          kernels::PackBf16Blocked(src, r0, r1, dst, src.rows, 0);
          break;
        case kernels::Precision::kInt8:
          if (!RowsFinite(src, r0, r1, row)) {
            bad.store(true);
            return;
          }
          kernels::QuantizeQ8(src, r0, r1, dst);
          break;
        case kernels::Precision::kF32: {
          const size_t row_bytes = static_cast<size_t>(src.cols) * DTypeSize(src.dtype);
          std::memcpy(dst + static_cast<size_t>(r0) * row_bytes,
                      static_cast<const std::byte*>(src.data) + static_cast<size_t>(r0) * row_bytes,
                      static_cast<size_t>(r1 - r0) * row_bytes);
          break;
        }
      }
    }
  });
  if (bad.load()) {
    return DataLoss("tensor '" + std::string(kVisionWeightPrefix) + name +
                    "' holds a value that is not finite; it cannot be quantized to Q8");
  }
  return Status::Ok();
}

kernels::Matrix MatrixAt(kernels::Precision p, const kernels::Matrix& src, const std::byte* at) {
  switch (p) {
    case kernels::Precision::kBF16: return kernels::Bf16BlockedMatrixAt(at, src.rows, src.cols);
    case kernels::Precision::kInt8: return kernels::Q8MatrixAt(at, src.rows, src.cols);
    case kernels::Precision::kF32: break;
  }
  return {src.dtype, at, src.rows, src.cols};
}

}  // namespace

StatusOr<VisionWeights> BindVisionWeights(const VisionConfig& cfg,
                                          const SafetensorsCheckpoint& ckpt) {
  Binder b(ckpt);
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

StatusOr<std::unique_ptr<PreparedVisionWeights>> PreparedVisionWeights::Prepare(
    const VisionConfig& /*cfg*/, const VisionWeights& w, const kernels::Context& ctx) {
  std::unique_ptr<PreparedVisionWeights> pw(new PreparedVisionWeights());
  const kernels::Precision p = ctx.precision();

  // Plan: every matrix (name, source, where its prepared form goes) and every f32 vector.
  struct MatrixJob {
    std::string name;
    const kernels::Matrix* src;
    kernels::Matrix* dst;
  };
  struct VectorJob {
    std::string name;
    const kernels::Matrix* src;
    const float** dst;
  };
  std::vector<MatrixJob> mats;
  std::vector<VectorJob> vecs;
  pw->blocks_.resize(w.blocks.size());
  pw->deepstack_.resize(w.deepstack.size());
  const auto linear = [&](const std::string& name, const VisionRawLinear& raw, VisionLinear* out) {
    mats.push_back({name + ".weight", &raw.w, &out->w});
    vecs.push_back({name + ".bias", &raw.b, &out->b});
  };
  const auto norm = [&](const std::string& name, const VisionRawNorm& raw, VisionNorm* out) {
    vecs.push_back({name + ".weight", &raw.w, &out->w});
    vecs.push_back({name + ".bias", &raw.b, &out->b});
  };
  const auto merger = [&](const std::string& name, const VisionRawMerger& raw, VisionMerger* out) {
    norm(name + "norm", raw.norm, &out->norm);
    linear(name + "linear_fc1", raw.fc1, &out->fc1);
    linear(name + "linear_fc2", raw.fc2, &out->fc2);
  };
  linear("patch_embed.proj", w.patch, &pw->patch_);
  vecs.push_back({"pos_embed.weight", &w.pos, &pw->pos_});
  for (size_t j = 0; j < w.blocks.size(); ++j) {
    const std::string name = "blocks." + std::to_string(j) + ".";
    const VisionRawBlock& raw = w.blocks[j];
    VisionBlock& out = pw->blocks_[j];
    norm(name + "norm1", raw.norm1, &out.norm1);
    norm(name + "norm2", raw.norm2, &out.norm2);
    linear(name + "attn.qkv", raw.qkv, &out.qkv);
    linear(name + "attn.proj", raw.proj, &out.proj);
    linear(name + "mlp.linear_fc1", raw.fc1, &out.fc1);
    linear(name + "mlp.linear_fc2", raw.fc2, &out.fc2);
  }
  merger("merger.", w.merger, &pw->merger_);
  for (size_t k = 0; k < w.deepstack.size(); ++k) {
    merger("deepstack_merger_list." + std::to_string(k) + ".", w.deepstack[k], &pw->deepstack_[k]);
  }

  uint64_t total = 0;
  for (const MatrixJob& m : mats) {
    const uint64_t bytes = StorageBytes(p, *m.src);
    pw->entries_.push_back({m.name, "", m.src->rows, m.src->cols, total, bytes});
    total += AlignUp(bytes);
  }
  VLS_ASSIGN_OR_RETURN(pw->region_, HugeRegion::Allocate(std::max<uint64_t>(total, kAlign)));
  for (size_t i = 0; i < mats.size(); ++i) {
    Entry& e = pw->entries_[i];
    std::byte* at = pw->region_->data() + e.offset;
    VLS_RETURN_IF_ERROR(Convert(p, *mats[i].src, mats[i].name, at, ctx));
    *mats[i].dst = MatrixAt(p, *mats[i].src, at);
    e.storage = StorageName(*mats[i].dst);
  }

  size_t floats = 0;
  for (const VectorJob& v : vecs) {
    pw->vector_entries_.push_back({v.name, "F32", v.src->rows, v.src->cols, floats * 4,
                                   static_cast<uint64_t>(v.src->rows * v.src->cols) * 4});
    floats += static_cast<size_t>(v.src->rows * v.src->cols);
  }
  pw->vectors_.resize(floats);
  for (size_t i = 0; i < vecs.size(); ++i) {
    const kernels::Matrix& src = *vecs[i].src;
    float* out = pw->vectors_.data() + pw->vector_entries_[i].offset / 4;
    for (int64_t r = 0; r < src.rows; ++r) kernels::LoadRow(src, r, out + r * src.cols);
    *vecs[i].dst = out;
  }
  return pw;
}

uint64_t PreparedVisionWeights::bytes() const {
  uint64_t n = vectors_.size() * sizeof(float);
  for (const Entry& e : entries_) n += e.bytes;
  return n;
}

std::string PreparedVisionWeights::LayoutText() const {
  std::ostringstream o;
  for (const Entry& e : entries_) {
    o << "visual." << e.name << ' ' << e.storage << " [" << e.rows << ", " << e.cols << "] @"
      << e.offset << '\n';
  }
  for (const Entry& e : vector_entries_) {
    o << "visual." << e.name << " F32 [" << e.rows * e.cols << "]\n";
  }
  return o.str();
}

}  // namespace vls
