// End-to-end timing of the vision tower (VisionModel::Encode): load, then `reps` encodes of one
// image. Built with the tests, never run by them.
//
//   build/…/src/vision/vision_bench [--model DIR] [--precision bf16|f32|int8] [--threads 2]
//                                   [--side 448] [--reps 3] [--reference]
//
// Without --model it writes (once, then reuses) a random BF16 checkpoint with the Qwen3-VL-2B
// tower's shape (depth 24, Dv 1024, Iv 4096, 16 heads, 48x48 positions, out 2048, DeepStack
// after blocks 5/11/17) to $TMPDIR/vls_vision_bench_2b. --side S encodes one S×S image
// (S/16 patches a side; 448 → 784 patches, 196 tokens). Prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "vision/vision_model.h"
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

int Main(int argc, char** argv) {
  std::string model, precision = "bf16";
  int threads = 2, side = 448, reps = 3;
  bool reference = false;
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
      side = std::atoi(next().c_str());
    } else if (f == "--reps") {
      reps = std::max(1, std::atoi(next().c_str()));
    } else if (f == "--reference") {
      reference = true;
    } else {
      std::fprintf(stderr, "vision_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
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
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int n = side / cfg.patch_size / 2 * 2;
  const std::vector<GridThw> grids = {{1, n, n}};
  int64_t rows = 0;
  const std::vector<float> px = vision_test::RandomPixels(cfg, grids, 1, &rows);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    auto out = reference ? (*m)->ReferenceEncode(px, rows, grids, nullptr)
                         : (*m)->Encode(px, rows, grids, nullptr);
    if (!out.ok()) {
      std::fprintf(stderr, "vision_bench: %s\n", out.status().ToString().c_str());
      return 1;
    }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(times.begin(), times.end());
  // Multiply-adds of the matmuls: blocks (qkv, proj, fc1, fc2), attention (QKᵀ and PV), mergers.
  const double np = static_cast<double>(rows), Dv = cfg.hidden, Iv = cfg.intermediate;
  const double Md = static_cast<double>(cfg.merged_dim()), nv = np / 4;
  const double macs =
      cfg.depth * (np * (4 * Dv * Dv + 2 * Dv * Iv) + 2 * np * np * Dv) +
      np * Dv * static_cast<double>(cfg.patch_dim()) +
      (1 + cfg.deepstack_visual_indexes.size()) * nv * (Md * Md + Md * cfg.out_hidden);
  std::printf(
      "{\"precision\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"patches\":%lld,\"load_s\":%.2f,"
      "\"encode_s\":{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f},\"gflops\":%.1f,"
      "\"weight_mb\":%.0f}\n",
      precision.c_str(), ctx.pool().threads(), ctx.variant().name, static_cast<long long>(rows),
      load_s, times.front(), times[times.size() / 2], times.back(), 2 * macs / times.front() / 1e9,
      static_cast<double>((*m)->weight_bytes()) / 1e6);
  return 0;
}

}  // namespace
}  // namespace vls

int main(int argc, char** argv) { return vls::Main(argc, argv); }
