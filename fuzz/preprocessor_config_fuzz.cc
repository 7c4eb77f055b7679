// Fuzz target for preprocessor_config.json (ParseImageProcessorConfig) and what an accepted
// config drives: SmartResize / ImageGridThw on a few image sizes and PreprocessImages on a tiny
// image under a small memory budget.
//
// Every input must give a Status naming the file or a config within the documented bounds
// (image_processor_config.h); parsing is deterministic; an accepted config's grids are valid
// and its pixel_values finite and of the announced shape.
//
// Real fuzzing: scripts/fuzz.sh 600 preprocessor_config. Without libFuzzer,
// `preprocessor_config_fuzz_replay` (a ctest) runs this target over
// tests/corpus/preprocessor_config and deterministic mutations of it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "vision/image_processor_config.h"
#include "vision/preprocess.h"

namespace {

constexpr char kLabel[] = "fuzz-preprocessor_config.json";

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "preprocessor_config_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckBounds(const vls::ImageProcessorConfig& c) {
  if (c.min_pixels < 1 || c.min_pixels > c.max_pixels ||
      c.max_pixels > vls::kMaxImageProcessorPixels) {
    Fail("accepted bad pixel limits", std::to_string(c.min_pixels));
  }
  if (c.patch_size < 1 || c.patch_size > vls::kMaxPatchSize || c.temporal_patch_size < 1 ||
      c.temporal_patch_size > vls::kMaxTemporalPatchSize || c.merge_size < 1 ||
      c.merge_size > vls::kMaxMergeSize) {
    Fail("accepted a patch size out of bounds", std::to_string(c.patch_size));
  }
  for (int i = 0; i < 3; ++i) {
    if (!std::isfinite(c.image_mean[i]) || !std::isfinite(c.image_std[i]) ||
        std::fabs(c.image_std[i]) < 1e-6f) {
      Fail("accepted a bad mean or std", std::to_string(c.image_std[i]));
    }
  }
  if (!(c.rescale_factor > 0) || !std::isfinite(c.rescale_factor)) {
    Fail("accepted a bad rescale_factor", std::to_string(c.rescale_factor));
  }
}

void CheckPreprocessing(const vls::ImageProcessorConfig& c) {
  const int sizes[][2] = {{1, 1}, {480, 640}, {1, 200}, {4000, 3000}, {37, 1001}};
  for (const auto& s : sizes) {
    auto g = vls::ImageGridThw(s[0], s[1], c);
    if (!g.ok()) continue;  // e.g. sides not multiples of the factor without do_resize
    if (!vls::ValidateGridThw(*g, c.merge_size, "grid").ok() || g->t != 1) {
      Fail("invalid grid", vls::GridToString(*g));
    }
  }
  vls::image::RgbImage im;
  im.height = 3;
  im.width = 5;
  for (int i = 0; i < 45; ++i) im.pixels.push_back(static_cast<uint8_t>(i * 37));
  auto pv = vls::PreprocessImages({&im, 1}, c, nullptr, int64_t{1} << 18);
  if (!pv.ok()) return;
  if (pv->grids.size() != 1 || static_cast<int64_t>(pv->data.size()) != pv->rows * pv->cols ||
      pv->cols != 3 * int64_t{c.temporal_patch_size} * c.patch_size * c.patch_size ||
      pv->rows != int64_t{pv->grids[0].h} * pv->grids[0].w) {
    Fail("pixel_values of the wrong shape", std::to_string(pv->rows));
  }
  for (float v : pv->data) {
    if (!std::isfinite(v)) Fail("non-finite pixel value", std::to_string(v));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = vls::ParseImageProcessorConfig(text, kLabel);
  if (std::getenv("VLS_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "preprocessor_config: %s\n", cfg.status().ToString().c_str());
  }
  if (!cfg.ok()) {
    if (cfg.status().message().find(kLabel) == std::string::npos) {
      Fail("error message does not name the file", cfg.status().ToString());
    }
    return 0;
  }
  CheckBounds(*cfg);
  auto again = vls::ParseImageProcessorConfig(text, kLabel);
  if (!again.ok() || again->min_pixels != cfg->min_pixels || again->max_pixels != cfg->max_pixels ||
      again->image_std != cfg->image_std) {
    Fail("parsing is not deterministic", "");
  }
  CheckPreprocessing(*cfg);
  return 0;
}
