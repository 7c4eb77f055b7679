#include "kernels/dispatch.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/bf16_blocked.h"
#include "kernels/gemm_probe.h"
#include "kernels/onednn_matmul.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/row_prologue.h"
#include "tensor/dtype.h"

namespace vls::kernels {

namespace {

void RefMatMulF32(const float* x, int64_t M, int64_t K, const Matrix& w, int64_t n0, int64_t n1,
                  float* y) {
  const int64_t N = w.rows;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    LoadRow(w, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * K;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += xm[k] * row[static_cast<size_t>(k)];
      y[m * N + n] = acc;
    }
  }
}

void RefMatMulBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int64_t n0,
                   int64_t n1, float* y) {
  const int64_t N = w.rows;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    LoadRow(w, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      const uint16_t* xm = xb + m * K;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += Bf16ToF32(xm[k]) * row[static_cast<size_t>(k)];
      y[m * N + n] = acc;
    }
  }
}

float RefDot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void RefAxpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void RefScores(const float* q, const float* k, int64_t stride, int64_t T, int64_t D, float scale,
               float* out) {
  for (int64_t t = 0; t < T; ++t) out[t] = RefDot(q, k + t * stride, D) * scale;
}

void RefWeightedSum(const float* p, const float* v, int64_t stride, int64_t T, int64_t D,
                    float* out) {
  std::fill_n(out, D, 0.0f);
  for (int64_t t = 0; t < T; ++t) RefAxpy(p[t], v + t * stride, out, D);
}

// y[m, n] = Σ_b sx[m, b] · sw[n, b] · dot_b, with dot_b = Σ qx · qw exact in int32, sw widened
// from F16, and the f32 sum taken in block order as fma(dot_b · sx, sw, acc): the optimised
// kernels do the same operations per (m, n), so they match this bit for bit.
void RefMatMulQ8(const Q8Activations& x, const Matrix& w, int64_t n0, int64_t n1, float* y) {
  const int64_t M = x.rows, K = x.cols, N = w.rows, nb = x.blocks;
  const auto* wq = static_cast<const int8_t*>(w.data);
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t dot = 0;
        for (int64_t k = b * kQ8Block; k < std::min(K, (b + 1) * kQ8Block); ++k) {
          dot += int32_t{x.q[size_t(m * K + k)]} * wq[Q8WeightIndex(K, n, k)];
        }
        const float t = static_cast<float>(dot) * x.scales[size_t(m * nb + b)];
        acc = std::fma(t, F16ToF32(w.scales[Q8BlockIndex(K, n, b)]), acc);
      }
      y[m * N + n] = acc;
    }
  }
}

// RefMatMulBf16 reads w through LoadRow, so it also serves BF16 blocked matrices.
const KernelVariant kReference = {
    .name = "reference",
    .matmul_f32 = RefMatMulF32,
    .matmul_bf16 = RefMatMulBf16,
    .scores = RefScores,
    .weighted_sum = RefWeightedSum,
    .quantize_q8 = QuantizeActivationsQ8,
    .matmul_q8 = RefMatMulQ8,
    .matmul_bf16_blocked = RefMatMulBf16,
    .rms_norm = RmsNorm,
    .silu_mul = SiluMul,
    .weighted_rows = WeightedRows,
};

bool CpuHasAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // F16C through cpuid: not every compiler's __builtin_cpu_supports knows it.
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__)
  return CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  // The variant also holds the Q8 kernels (AVX512-VNNI, present on every AVX512-BF16 CPU).
  return CpuHasAvx512Vnni() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool OneDnnEnabled();

struct Choice {
  const KernelVariant* variant;
  GemmProbe probe;
};

// The last supported variant, except that on AVX512-BF16 CPUs "avx512bf16-fma" replaces
// "avx512bf16" when the probe measures its BF16 GEMM clearly faster (kernels/gemm_probe.h).
Choice ChooseDefault() {
  const std::vector<const KernelVariant*> all = SupportedVariants();
  if (const char* env = std::getenv("VLS_KERNELS"); env != nullptr && *env != '\0') {
    for (const KernelVariant* v : all) {
      if (std::strcmp(v->name, env) == 0) return {v, {}};
    }
    std::fprintf(stderr, "vlstack: VLS_KERNELS=%s is not a supported variant; choosing\n", env);
  }
  const KernelVariant* best = all.back();
  if (all.size() >= 2 && std::strcmp(best->name, "avx512bf16") == 0 &&
      std::strcmp(all[all.size() - 2]->name, "avx512bf16-fma") == 0) {
    const KernelVariant* fma = all[all.size() - 2];
    GemmProbe probe = ProbeBf16Gemm(*best, *fma, OneDnnEnabled());
    return {probe.FmaFaster() ? fma : best, probe};
  }
  return {best, {}};
}

const Choice& DefaultChoice() {
  static const Choice chosen = ChooseDefault();
  return chosen;
}

}  // namespace

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kF32: return "f32";
    case Precision::kBF16: return "bf16";
    case Precision::kInt8: return "int8";
    case Precision::kInt4: return "int4";
  }
  return "f32";
}

const KernelVariant& ReferenceVariant() { return kReference; }

std::vector<const KernelVariant*> SupportedVariants() {
  std::vector<const KernelVariant*> out = {&kReference};
  if (CpuHasAvx2() && Avx2Variant() != nullptr) out.push_back(Avx2Variant());
  if (CpuHasAvx512() && Avx512Variant() != nullptr) out.push_back(Avx512Variant());
  if (CpuHasAvx512Vnni() && Avx512VnniVariant() != nullptr) out.push_back(Avx512VnniVariant());
  if (CpuHasAvx512Bf16() && Avx512Bf16Variant() != nullptr) {
    out.push_back(Avx512Bf16FmaVariant());
    out.push_back(Avx512Bf16Variant());
  }
  return out;
}

// By name: taking the AVX-512 variants' addresses would construct them, which runs AVX-512
// instructions.
bool IsAvx512Variant(const KernelVariant& v) {
  return v.name != nullptr && std::strncmp(v.name, "avx512", 6) == 0;
}

const KernelVariant& DefaultVariant() { return *DefaultChoice().variant; }

const GemmProbe& DefaultVariantProbe() { return DefaultChoice().probe; }

namespace {
// oneDNN unless VLS_ONEDNN=0 (for A/B measurements) or the build/CPU lacks it.
bool OneDnnEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("VLS_ONEDNN");
    return !(env != nullptr && std::strcmp(env, "0") == 0) && OneDnnBf16Available();
  }();
  return enabled;
}
// A failing oneDNN call is reported once; the own kernel then computes the product.
void WarnOneDnnFailedOnce(const Status& s) {
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr, "vlstack: oneDNN matmul failed, using own kernels: %s\n",
                 s.ToString().c_str());
  });
}
// BF16 rounding for a variant without a vector kernel.
void ScalarToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToBf16(x[i]);
}
}  // namespace

void ToBf16(const float* x, int64_t n, uint16_t* out) {
  static const auto convert =
      DefaultVariant().to_bf16 != nullptr ? DefaultVariant().to_bf16 : ScalarToBf16;
  convert(x, n, out);
}

// Over the pool: for prefill, millions of values.
const uint16_t* Context::RoundToBf16(const float* x, int64_t M, int64_t K,
                                     ScratchArena& own) const {
  auto* xb = own.matmul_x.Reserve<uint16_t>(static_cast<size_t>(M * K));
  const auto convert = variant_->to_bf16 != nullptr ? variant_->to_bf16 : ScalarToBf16;
  pool_->ParallelFor(M, std::max<int64_t>(1, 65536 / K),
                     [&](int64_t b, int64_t e) { convert(x + b * K, (e - b) * K, xb + b * K); });
  return xb;
}

// Q8 weights: the activations are quantized once per call (a RowPrologue) into the caller's
// arena, then N is split in blocks of 16 (one interleaved weight group) like the other paths.
// A variant without Q8 kernels uses the reference ones.
void Context::MatMulQ8(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                       ScratchArena& own) const {
  Q8Activations& a = own.Q8(M, K);
  const KernelVariant& q = variant_->matmul_q8 != nullptr ? *variant_ : ReferenceVariant();
  RowPrologue quantize(M, pool_->threads());
  constexpr int64_t kBlock = 16;
  const int64_t N = w.rows, blocks = (N + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, M * K * kBlock));
  pool_->ParallelFor(blocks, grain, [&](int64_t b, int64_t e) {
    quantize.Run([&](int64_t r0, int64_t r1) { q.quantize_q8(x, r0, r1, &a); });
    q.matmul_q8(a, w, b * kBlock, std::min(N, e * kBlock), y);
  });
}

// Q4 and Q6 weights: as Q8, the activations (int8 per 32 columns, with their sums) in the
// caller's matmul_x buffer.
void Context::MatMulQ4(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                       ScratchArena& own) const {
  const Q4Activations a =
      Q4ActivationsAt(own.matmul_x.Reserve(static_cast<size_t>(Q4ActivationBytes(M, K))), M, K);
  const Q4Kernels& q = Q4KernelsFor(*variant_);
  const auto matmul = w.format == MatrixFormat::kQ6
                          ? (q.matmul_q6 != nullptr ? q.matmul_q6 : RefMatMulQ6)
                          : q.matmul;
  RowPrologue quantize(M, pool_->threads());
  static_assert(kQ4Rows == kQ6Rows, "Q4 and Q6 split N alike");
  constexpr int64_t kBlock = kQ4Rows;
  const int64_t N = w.rows, blocks = (N + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, M * K * kBlock));
  pool_->ParallelFor(blocks, grain, [&](int64_t b, int64_t e) {
    quantize.Run([&](int64_t r0, int64_t r1) { q.quantize(x, r0, r1, a); });
    matmul(a, w, b * kBlock, std::min(N, e * kBlock), y);
  });
}

// BF16 blocked weights: oneDNN reads them in place from kOneDnnMinRows rows (row blocks over
// the pool, each a single-threaded call); below that, or when oneDNN fails, the variant's blocked
// kernel (the reference's when it has none) over 64-row blocks.
void Context::MatMulBf16Blocked(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                                ScratchArena& own) const {
  const int64_t N = w.rows;
  if (use_onednn_ && variant_->onednn_blocked && M >= kOneDnnMinRows) {
    const uint16_t* xb = RoundToBf16(x, M, K, own);
    std::mutex mu;
    Status failed;
    // Row blocks of at least kOneDnnMinRows, at most kOneDnnRows, one per thread when that
    // fits (oneDNN at 32 rows runs about 10% below its rate at 64 and more).
    const int64_t threads = pool_->threads();
    const int64_t rows =
        std::clamp<int64_t>((M + threads - 1) / threads, kOneDnnMinRows, kOneDnnRows);
    pool_->ParallelFor((M + rows - 1) / rows, 1, [&](int64_t b, int64_t e, int thread) {
      Status s = OneDnnMatMulBf16BlockedRows(xb, M, K, w, b * rows, std::min(M, e * rows), y,
                                             &scratch(thread));
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failed = std::move(s);
      }
    });
    if (failed.ok()) return;
    WarnOneDnnFailedOnce(failed);
  }
  const KernelVariant& v =
      variant_->matmul_bf16_blocked != nullptr ? *variant_ : ReferenceVariant();
  auto* xb = own.matmul_x.Reserve<uint16_t>(static_cast<size_t>(M * K));
  const auto convert = variant_->to_bf16 != nullptr ? variant_->to_bf16 : ScalarToBf16;
  RowPrologue round(M, pool_->threads());
  const int64_t blocks = (N + kBf16BlockN - 1) / kBf16BlockN;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, M * K * kBf16BlockN));
  pool_->ParallelFor(blocks, grain, [&](int64_t b, int64_t e) {
    round.Run([&](int64_t r0, int64_t r1) { convert(x + r0 * K, (r1 - r0) * K, xb + r0 * K); });
    v.matmul_bf16_blocked(xb, M, K, w, b * kBf16BlockN, std::min(N, e * kBf16BlockN), y);
  });
}

Context::Context(int threads, Precision precision, const KernelVariant* variant)
    : pool_(std::make_unique<ThreadPool>(threads)),
      precision_(precision),
      variant_(variant != nullptr ? variant : &DefaultVariant()),
      use_onednn_(variant_ != &ReferenceVariant() && OneDnnEnabled()),
      stream_tuner_(std::make_unique<StreamTuner>(StreamTuner::FromEnvironment())),
      arenas_(std::make_unique<ScratchArena[]>(static_cast<size_t>(pool_->threads()))) {}

size_t Context::ScratchBytes() const {
  size_t total = 0;
  for (int t = 0; t < pool_->threads(); ++t) total += arenas_[static_cast<size_t>(t)].bytes();
  return total;
}

void Context::MatMul(const float* x, int64_t M, int64_t K, const Matrix& w, float* y,
                     const OneDnnPackedBf16* packed) const {
  const int64_t N = w.rows;
  if (M <= 0 || N <= 0) return;
  // The converted activations live in the arena of whoever runs this product: the caller's
  // (participant 0) while it holds the pool, which its loops would take anyway.
  const ThreadPool::Lease lease(*pool_);
  ScratchArena& own = scratch(lease.thread());
  if (w.format == MatrixFormat::kQ8) return MatMulQ8(x, M, K, w, y, own);
  if (w.format == MatrixFormat::kBf16Blocked) return MatMulBf16Blocked(x, M, K, w, y, own);
  if (w.format == MatrixFormat::kQ4 || w.format == MatrixFormat::kQ6) {
    return MatMulQ4(x, M, K, w, y, own);
  }
  // Work is split over output columns in blocks of 16 weight rows, so each weight row is
  // read by one thread, once for all M rows.
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  // Below about 64k multiply-adds a loop is cheaper on one thread than a wake-up.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, M * K * kBlock));
  if (precision_ == Precision::kBF16 && w.dtype == DType::kBF16 &&
      variant_->matmul_bf16 != nullptr) {
    const bool onednn = use_onednn_ && M >= kOneDnnMinRows;
    if (onednn && packed != nullptr && packed->rows() == N && packed->cols() == K) {
      // Packed weights run as one oneDNN call on its own OpenMP team of pool().threads()
      // (which also rounds x), so the pool stays idle meanwhile.
      Status s;
      pool_->RunExclusive(
          [&] { s = OneDnnMatMulRoundingX(x, M, K, w, packed, pool_->threads(), y, &own); });
      if (s.ok()) return;
      WarnOneDnnFailedOnce(s);
    }
    const uint16_t* xb = RoundToBf16(x, M, K, own);
    if (onednn) {
      // One single-threaded oneDNN call per block of output columns, the blocks spread over
      // the pool: exactly the pool's threads, and a descheduled thread does not stall the
      // others as oneDNN's static OpenMP split would on a shared machine.
      std::mutex mu;
      Status failed;
      pool_->ParallelFor(
          (N + kOneDnnCols - 1) / kOneDnnCols, 1, [&](int64_t b, int64_t e, int thread) {
            Status s = OneDnnMatMulBf16Columns(xb, M, K, w, b * kOneDnnCols,
                                               std::min(N, e * kOneDnnCols), y, &scratch(thread));
            if (!s.ok()) {
              std::lock_guard<std::mutex> lock(mu);
              failed = std::move(s);
            }
          });
      if (failed.ok()) return;
      WarnOneDnnFailedOnce(failed);
    }
    pool_->ParallelFor(blocks, grain, [&](int64_t b, int64_t e) {
      variant_->matmul_bf16(xb, M, K, w, b * kBlock, std::min(N, e * kBlock), y);
    });
    return;
  }
  pool_->ParallelFor(blocks, grain, [&](int64_t b, int64_t e) {
    variant_->matmul_f32(x, M, K, w, b * kBlock, std::min(N, e * kBlock), y);
  });
}

}  // namespace vls::kernels
