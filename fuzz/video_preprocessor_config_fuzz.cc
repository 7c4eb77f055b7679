// Fuzz target for video_preprocessor_config.json (ParseVideoProcessorConfig) and what an
// accepted config drives: SampleFrameIndices on a few videos, VideoGridThw on a few clip sizes,
// VideoTimestamps / FormatTimestamp, and PreprocessVideo on a tiny clip under a small budget.
//
// Every input must give a Status naming the file or a config within the documented bounds
// (video_processor_config.h); parsing is deterministic; sampled indices are in range and
// non-decreasing; an accepted config's grids are valid and its pixel_values finite and of the
// announced shape.
//
// Real fuzzing: scripts/fuzz.sh 600 video_preprocessor_config. Without libFuzzer,
// `video_preprocessor_config_fuzz_replay` (a ctest) runs this target over
// tests/corpus/video_preprocessor_config and deterministic mutations of it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "vision/video_preprocess.h"
#include "vision/video_processor_config.h"

namespace {

constexpr char kLabel[] = "fuzz-video_preprocessor_config.json";

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "video_preprocessor_config_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckBounds(const vls::VideoProcessorConfig& c) {
  if (c.min_pixels < 1 || c.min_pixels > c.max_pixels ||
      c.max_pixels > vls::kMaxVideoProcessorPixels) {
    Fail("accepted bad pixel limits", std::to_string(c.min_pixels));
  }
  if (c.patch_size < 1 || c.patch_size > vls::kMaxPatchSize || c.temporal_patch_size < 1 ||
      c.temporal_patch_size > vls::kMaxTemporalPatchSize || c.merge_size < 1 ||
      c.merge_size > vls::kMaxMergeSize) {
    Fail("accepted a patch size out of bounds", std::to_string(c.patch_size));
  }
  if (!(c.fps > 0) || c.fps > vls::kMaxVideoSamplingFps || c.min_frames < 1 ||
      c.min_frames > c.max_frames || c.max_frames > vls::kMaxVideoFrames ||
      (c.num_frames && (*c.num_frames < 1 || *c.num_frames > vls::kMaxVideoFrames))) {
    Fail("accepted bad sampling", std::to_string(c.fps));
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

void CheckSampling(const vls::VideoProcessorConfig& c) {
  const struct {
    int64_t total;
    double fps;
  } videos[] = {{1, 30.0}, {3, 24.0}, {300, 30.0}, {100000, 29.97}, {7, 1e-3}};
  for (const auto& v : videos) {
    auto idx = vls::SampleFrameIndices(v.total, v.fps, c);
    if (!idx.ok()) continue;  // e.g. every frame of a long video without do_sample_frames
    if (idx->empty() || static_cast<int64_t>(idx->size()) > vls::kMaxVideoFrames) {
      Fail("sampled frame count out of bounds", std::to_string(idx->size()));
    }
    for (size_t i = 0; i < idx->size(); ++i) {
      if ((*idx)[i] < 0 || (*idx)[i] >= v.total || (i > 0 && (*idx)[i] < (*idx)[i - 1])) {
        Fail("sampled index out of order or range", std::to_string((*idx)[i]));
      }
    }
    const auto ts = vls::VideoTimestamps(*idx, v.fps, c.temporal_patch_size);
    const size_t tp = static_cast<size_t>(c.temporal_patch_size);
    if (ts.size() != (idx->size() + tp - 1) / tp) Fail("timestamp count", "");
    for (double t : ts) {
      if (!std::isfinite(t) || t < 0) Fail("bad timestamp", std::to_string(t));
      if (vls::FormatTimestamp(t).find(" seconds>") == std::string::npos) Fail("format", "");
    }
  }
}

void CheckGrids(const vls::VideoProcessorConfig& c) {
  const int64_t sizes[][3] = {{2, 1, 1},   {4, 480, 640},   {1, 64, 64},  {768, 1080, 1920},
                              {3, 1, 200}, {2, 4000, 3000}, {9, 37, 1001}};
  for (const auto& s : sizes) {
    auto g = vls::VideoGridThw(s[0], static_cast<int>(s[1]), static_cast<int>(s[2]), c);
    if (!g.ok()) continue;  // e.g. sides not multiples of the factor without do_resize
    const int64_t tp = c.temporal_patch_size;
    if (!vls::ValidateGridThw(*g, c.merge_size, "grid").ok() || g->t != (s[0] + tp - 1) / tp) {
      Fail("invalid grid", vls::GridToString(*g));
    }
  }
}

void CheckPreprocessing(const vls::VideoProcessorConfig& c) {
  std::vector<vls::image::RgbImage> clip(3);
  for (size_t f = 0; f < clip.size(); ++f) {
    clip[f].height = 3;
    clip[f].width = 5;
    for (int i = 0; i < 45; ++i) clip[f].pixels.push_back(static_cast<uint8_t>(i * 37 + f * 11));
  }
  auto pv = vls::PreprocessVideo(clip, c, nullptr, int64_t{1} << 18);
  if (!pv.ok()) return;
  if (pv->grids.size() != 1 || static_cast<int64_t>(pv->data.size()) != pv->rows * pv->cols ||
      pv->cols != 3 * int64_t{c.temporal_patch_size} * c.patch_size * c.patch_size ||
      pv->rows != int64_t{pv->grids[0].t} * pv->grids[0].h * pv->grids[0].w) {
    Fail("pixel_values of the wrong shape", std::to_string(pv->rows));
  }
  for (float v : pv->data) {
    if (!std::isfinite(v)) Fail("non-finite pixel value", std::to_string(v));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = vls::ParseVideoProcessorConfig(text, kLabel);
  if (std::getenv("VLS_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "video_preprocessor_config: %s\n", cfg.status().ToString().c_str());
  }
  if (!cfg.ok()) {
    if (cfg.status().message().find(kLabel) == std::string::npos) {
      Fail("error message does not name the file", cfg.status().ToString());
    }
    return 0;
  }
  CheckBounds(*cfg);
  auto again = vls::ParseVideoProcessorConfig(text, kLabel);
  if (!again.ok() || again->min_pixels != cfg->min_pixels || again->max_pixels != cfg->max_pixels ||
      again->fps != cfg->fps || again->num_frames != cfg->num_frames ||
      again->image_std != cfg->image_std) {
    Fail("parsing is not deterministic", "");
  }
  CheckSampling(*cfg);
  CheckGrids(*cfg);
  CheckPreprocessing(*cfg);
  return 0;
}
