// End-to-end timing of the vision tower (VisionModel::Encode): load, then `reps` encodes of one
// image. Built with the tests, never run by them.
//
//   build/…/src/vision/vision_bench [--model DIR] [--precision bf16|f32|int8] [--threads 2]
//                                   [--side 448 | --size WxH] [--reps 3] [--reference]
//                                   [--profile] [--gemm-peak]
//
// Without --model it writes (once, then reuses) a random BF16 checkpoint with the Qwen3-VL-2B
// tower's shape (depth 24, Dv 1024, Iv 4096, 16 heads, 48x48 positions, out 2048, DeepStack
// after blocks 5/11/17) to $TMPDIR/vls_vision_bench_2b. --side S encodes one S×S image
// (S/16 patches a side; 448 → 784 patches, 196 tokens); --size WxH a W×H one (rounded down
// to 32-pixel multiples: 1280x720 → 80 × 44 patches). Prints one JSON line. --profile adds
// the time and GFLOP/s of each phase (vision_ops.h EncodePhase) over the timed reps.
// --gemm-peak instead measures the tower's GEMM shapes ([M, K] × [N, K]ᵀ, M 784 and 3600, K
// 1024 → N 3072/4096/1024 and K 4096 → N 1024) in BF16 three ways: Context::MatMul on BF16
// blocked weights (what the tower runs), oneDNN on the whole pool's OpenMP team with weights
// packed at load (OneDnnPackedBf16), and oneDNN with row-major weights read in place.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/bf16_blocked.h"
#include "kernels/onednn_matmul.h"
#include "tensor/dtype.h"
#include "vision/vision_flops.h"
#include "vision/vision_model.h"
#include "vision/vision_ops.h"
#include "vision/vision_test_util.h"

namespace vls {
namespace {

VisionConfig Tower2B() {
  VisionConfig c;
  c.depth = 24;
  c.hidden = 1024;
  c.intermediate = 4096;
  c.heads = 16;
  c.num_position_embeddings = 2304;
  c.out_hidden = 2048;
  c.deepstack_visual_indexes = {5, 11, 17};
  return c;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Resident set now (VmRSS of /proc/self/status), 0 when unreadable.
double CurrentRssMb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double mb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kb = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kb) == 1) mb = static_cast<double>(kb) / 1024.0;
  }
  std::fclose(f);
  return mb;
}

double Seconds(const std::chrono::steady_clock::time_point& a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// Best-of-`reps` time of fn.
template <typename Fn>
double Best(int reps, const Fn& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, Seconds(a));
  }
  return best;
}

int GemmPeak(int threads, int reps) {
  const kernels::Context ctx(threads, kernels::Precision::kBF16);
  struct Shape {
    int64_t M, K, N;
    const char* name;
  };
  const Shape shapes[] = {{784, 1024, 3072, "qkv"},  {784, 1024, 1024, "proj"},
                          {784, 1024, 4096, "fc1"},  {784, 4096, 1024, "fc2"},
                          {3600, 1024, 3072, "qkv"}, {3600, 1024, 1024, "proj"},
                          {3600, 1024, 4096, "fc1"}, {3600, 4096, 1024, "fc2"}};
  for (const Shape& sh : shapes) {
    std::vector<float> x(static_cast<size_t>(sh.M * sh.K)), y(static_cast<size_t>(sh.M * sh.N));
    std::vector<uint16_t> w(static_cast<size_t>(sh.N * sh.K)), xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 2001) / 1000 - 1;
    for (size_t i = 0; i < x.size(); ++i) xb[i] = F32ToBf16(x[i]);
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = F32ToBf16(static_cast<float>((i * 104729) % 2003) / 50000 - 0.02f);
    }
    const kernels::Matrix dense{
        .dtype = DType::kBF16, .data = w.data(), .rows = sh.N, .cols = sh.K};
    std::vector<uint16_t> blocked(static_cast<size_t>(kernels::Bf16BlockedBytes(sh.N, sh.K) / 2));
    kernels::PackBf16Blocked(dense, 0, sh.N, blocked.data(), sh.N, 0);
    const kernels::Matrix bm = kernels::Bf16BlockedMatrixAt(blocked.data(), sh.N, sh.K);
    const double flops = 2.0 * static_cast<double>(sh.M * sh.K * sh.N);
    const double t_ctx = Best(reps, [&] { ctx.MatMul(x.data(), sh.M, sh.K, bm, y.data()); });
    auto packed = kernels::OneDnnPackedBf16::Create(dense, threads);
    double t_packed = 0, t_dense = 0;
    if (packed.ok()) {
      t_packed = Best(reps, [&] {
        ctx.pool().RunExclusive(
            [&] { (void)(*packed)->MatMul(xb.data(), sh.M, threads, y.data()); });
      });
    }
    t_dense = Best(reps, [&] {
      ctx.pool().RunExclusive([&] {
        (void)kernels::OneDnnMatMulBf16(xb.data(), sh.M, sh.K, dense, threads, y.data());
      });
    });
    std::printf(
        "{\"gemm\":\"%s\",\"M\":%lld,\"K\":%lld,\"N\":%lld,\"threads\":%d,"
        "\"ctx_blocked_gflops\":%.1f,\"onednn_packed_gflops\":%.1f,\"onednn_dense_gflops\":%.1f}\n",
        sh.name, static_cast<long long>(sh.M), static_cast<long long>(sh.K),
        static_cast<long long>(sh.N), threads, flops / t_ctx / 1e9,
        t_packed > 0 ? flops / t_packed / 1e9 : 0.0, flops / t_dense / 1e9);
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::string model, precision = "bf16";
  int threads = 2, width = 448, height = 448, reps = 3;
  bool reference = false, profile = false, gemm_peak = false;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (f == "--model") {
      model = next();
    } else if (f == "--precision") {
      precision = next();
    } else if (f == "--threads") {
      threads = std::atoi(next().c_str());
    } else if (f == "--side") {
      width = height = std::atoi(next().c_str());
    } else if (f == "--size") {
      const std::string v = next();
      width = std::atoi(v.c_str());
      height = std::atoi(v.substr(v.find('x') + 1).c_str());
    } else if (f == "--profile") {
      profile = true;
    } else if (f == "--gemm-peak") {
      gemm_peak = true;
    } else if (f == "--reps") {
      reps = std::max(1, std::atoi(next().c_str()));
    } else if (f == "--reference") {
      reference = true;
    } else {
      std::fprintf(stderr, "vision_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (gemm_peak) return GemmPeak(threads, reps);
  const kernels::Precision p = precision == "f32"    ? kernels::Precision::kF32
                               : precision == "int8" ? kernels::Precision::kInt8
                                                     : kernels::Precision::kBF16;
  const VisionConfig cfg = Tower2B();
  if (model.empty()) {
    model = (std::filesystem::temp_directory_path() / "vls_vision_bench_2b").string();
    if (!std::filesystem::exists(model + "/model.safetensors")) {
      std::filesystem::create_directories(model);
      std::fprintf(stderr, "writing a random 2B-shaped vision checkpoint to %s\n", model.c_str());
      vision_test::CheckpointOptions o;
      o.dtype = DType::kBF16;
      const Status s = vision_test::WriteVisionCheckpoint(model, cfg, o);
      if (!s.ok()) {
        std::fprintf(stderr, "vision_bench: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const kernels::Context ctx(threads, p);
  const auto t0 = std::chrono::steady_clock::now();
  auto m = VisionModel::Load(model, cfg, ctx);
  if (!m.ok()) {
    std::fprintf(stderr, "vision_bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  const double rss_after_load = CurrentRssMb();
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int gw = width / cfg.patch_size / 2 * 2, gh = height / cfg.patch_size / 2 * 2;
  const std::vector<GridThw> grids = {{1, gh, gw}};
  int64_t rows = 0;
  const std::vector<float> px = vision_test::RandomPixels(cfg, grids, 1, &rows);
  std::vector<double> times;
  vision_internal::EncodeProfile prof;
  for (int r = 0; r < reps; ++r) {
    // The first rep warms up (oneDNN primitives); the profile covers the others.
    if (profile && r == 1) vision_internal::SetEncodeProfile(&prof);
    const auto a = std::chrono::steady_clock::now();
    auto out = reference ? (*m)->ReferenceEncode(px, rows, grids, nullptr)
                         : (*m)->Encode(px, rows, grids, nullptr);
    if (!out.ok()) {
      std::fprintf(stderr, "vision_bench: %s\n", out.status().ToString().c_str());
      return 1;
    }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  vision_internal::SetEncodeProfile(nullptr);
  std::sort(times.begin(), times.end());
  const double flops = VisionEncodeFlops(cfg, grids);
  std::printf(
      "{\"precision\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"patches\":%lld,\"load_s\":%.2f,"
      "\"encode_s\":{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f},\"gflops\":%.1f,"
      "\"weight_mb\":%.0f,\"rss_after_load_mb\":%.0f,\"peak_rss_mb\":%.0f}\n",
      precision.c_str(), ctx.pool().threads(), ctx.variant().name, static_cast<long long>(rows),
      load_s, times.front(), times[times.size() / 2], times.back(), flops / times.front() / 1e9,
      static_cast<double>((*m)->weight_bytes()) / 1e6, rss_after_load, PeakRssMb());
  if (profile && reps > 1) {
    double total = 0;
    for (double t : prof.seconds) total += t;
    for (int i = 0; i < vision_internal::kPhaseCount; ++i) {
      std::printf("  %-10s %8.1f ms/encode %5.1f%%  %7.1f GFLOP/s\n",
                  vision_internal::EncodePhaseName(i), 1e3 * prof.seconds[i] / (reps - 1),
                  100 * prof.seconds[i] / total,
                  prof.seconds[i] > 0 ? prof.flops[i] / prof.seconds[i] / 1e9 : 0.0);
    }
  }
  return 0;
}

}  // namespace
}  // namespace vls

int main(int argc, char** argv) { return vls::Main(argc, argv); }
