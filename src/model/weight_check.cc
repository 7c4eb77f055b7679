#include "model/weight_check.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/memory.h"
#include "base/thread_pool.h"

namespace vls {

namespace {

// A value of the IEEE format with exponent bits kExp is NaN or infinite exactly when all of
// them are set: (x & kExp) + (the lowest exponent bit) then carries into the sign bit. An OR
// of that over a block tells whether the block holds one, with only and, add and or, which the
// compiler vectorises at -O2 when the block's length is a constant.
template <typename U, U kExp>
struct Format {
  using Bits = U;
  static constexpr U kLow = kExp & static_cast<U>(~kExp + 1);
  static constexpr U kSign = static_cast<U>(U{1} << (8 * sizeof(U) - 1));
  static constexpr U kMantissa = static_cast<U>(~(kSign | kExp));
  static U Load(const std::byte* p) {
    U x;
    std::memcpy(&x, p, sizeof(U));
    return x;
  }
  static U Flag(U x) { return static_cast<U>((x & kExp) + kLow); }
};

template <typename F>
std::optional<NonFiniteElement> Scan(const void* data, int64_t n) {
  using U = typename F::Bits;
  constexpr int64_t kBlock = 1024;
  constexpr size_t kSize = sizeof(U);
  const auto* bytes = static_cast<const std::byte*>(data);
  auto locate = [&](int64_t begin, int64_t end) -> std::optional<NonFiniteElement> {
    for (int64_t i = begin; i < end; ++i) {
      const U x = F::Load(bytes + static_cast<size_t>(i) * kSize);
      if ((F::Flag(x) & F::kSign) != 0) return NonFiniteElement{i, (x & F::kMantissa) != 0};
    }
    return std::nullopt;
  };
  int64_t b = 0;
  for (; b + kBlock <= n; b += kBlock) {
    const std::byte* p = bytes + static_cast<size_t>(b) * kSize;
    U acc = 0;
    for (int64_t i = 0; i < kBlock; ++i)
      acc |= F::Flag(F::Load(p + static_cast<size_t>(i) * kSize));
    if ((acc & F::kSign) != 0) return locate(b, b + kBlock);
  }
  return locate(b, n);
}

using F32Format = Format<uint32_t, 0x7F800000u>;
using Bf16Format = Format<uint16_t, 0x7F80u>;
using F16Format = Format<uint16_t, 0x7C00u>;

// The first non-finite element of matrix `m` (rows of `cols` elements) over ctx's pool, in
// chunks of about 4 MiB whose file pages are released once scanned; the lowest index wins.
std::optional<NonFiniteElement> ScanMatrix(const kernels::Matrix& m, const kernels::Context& ctx) {
  const size_t row_bytes = static_cast<size_t>(m.cols) * DTypeSize(m.dtype);
  const int64_t rows_per_chunk = std::max<int64_t>(
      1, static_cast<int64_t>((size_t{4} << 20) / std::max<size_t>(1, row_bytes)));
  const int64_t chunks = (m.rows + rows_per_chunk - 1) / rows_per_chunk;
  const auto* base = static_cast<const std::byte*>(m.data);
  std::mutex mu;
  std::optional<NonFiniteElement> first;
  ctx.pool().ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1, int /*thread*/) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * rows_per_chunk, r1 = std::min(m.rows, r0 + rows_per_chunk);
      const std::byte* p = base + static_cast<size_t>(r0) * row_bytes;
      std::optional<NonFiniteElement> bad = FindNonFinite(m.dtype, p, (r1 - r0) * m.cols);
      ReleaseFilePages(p, static_cast<size_t>(r1 - r0) * row_bytes);
      if (bad) {
        bad->index += r0 * m.cols;
        const std::lock_guard<std::mutex> lock(mu);
        if (!first || bad->index < first->index) first = bad;
        return;
      }
    }
  });
  return first;
}

}  // namespace

std::optional<NonFiniteElement> FindNonFinite(DType dtype, const void* data, int64_t n) {
  switch (dtype) {
    case DType::kF32: return Scan<F32Format>(data, n);
    case DType::kBF16: return Scan<Bf16Format>(data, n);
    case DType::kF16: return Scan<F16Format>(data, n);
    default: return std::nullopt;
  }
}

Status NonFiniteWeightError(const std::string& tensor, const NonFiniteElement& e, int64_t cols) {
  std::string where = "element " + std::to_string(e.index);
  if (cols > 0) {
    where += " (row " + std::to_string(e.index / cols) + ", column " +
             std::to_string(e.index % cols) + ")";
  }
  return DataLoss("tensor '" + tensor + "' has " + (e.nan ? "a NaN" : "an infinity") + " at " +
                  where + "; weights must be finite (the checkpoint is corrupt)");
}

Status CheckUnpreparedWeights(const Qwen3Config& cfg, const Qwen3Weights& w,
                              const kernels::Context& ctx) {
  const std::string& p = cfg.weight_prefix;
  auto vec = [](const std::string& name, const std::vector<float>& v) {
    const std::optional<NonFiniteElement> bad =
        FindNonFinite(DType::kF32, v.data(), static_cast<int64_t>(v.size()));
    return bad ? NonFiniteWeightError(name, *bad, 0) : Status::Ok();
  };
  VLS_RETURN_IF_ERROR(vec(p + "norm.weight", w.final_norm));
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string lp = p + "layers." + std::to_string(l) + ".";
    const Qwen3LayerWeights& L = w.layers[static_cast<size_t>(l)];
    VLS_RETURN_IF_ERROR(vec(lp + "input_layernorm.weight", L.input_norm));
    VLS_RETURN_IF_ERROR(vec(lp + "self_attn.q_norm.weight", L.q_norm));
    VLS_RETURN_IF_ERROR(vec(lp + "self_attn.k_norm.weight", L.k_norm));
    VLS_RETURN_IF_ERROR(vec(lp + "post_attention_layernorm.weight", L.post_norm));
  }
  // Tied, the embedding is the LM head, which Prepare checks.
  if (!cfg.tied) {
    if (const std::optional<NonFiniteElement> bad = ScanMatrix(w.embed, ctx)) {
      return NonFiniteWeightError(p + "embed_tokens.weight", *bad, w.embed.cols);
    }
  }
  return Status::Ok();
}

}  // namespace vls
