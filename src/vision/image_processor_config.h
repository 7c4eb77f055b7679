// preprocessor_config.json: how images become pixel_values (Qwen2VLImageProcessorFast, the
// processor Qwen3-VL checkpoints name; spec §D.3).
#ifndef VLSTACK_VISION_IMAGE_PROCESSOR_CONFIG_H_
#define VLSTACK_VISION_IMAGE_PROCESSOR_CONFIG_H_

#include <array>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace vls {

// Bounds a config must keep (errors name the key and the file).
inline constexpr int64_t kMaxImageProcessorPixels = int64_t{1} << 28;  // 16384^2 after resizing
inline constexpr int kMaxPatchSize = 256;
inline constexpr int kMaxTemporalPatchSize = 16;
inline constexpr int kMaxMergeSize = 16;
inline constexpr size_t kMaxPreprocessorConfigBytes = size_t{1} << 20;  // 1 MiB

// The defaults are the values every Qwen3-VL checkpoint ships, so a key the file leaves out reads
// as Qwen3-VL's value (transformers' class defaults are Qwen2-VL's: patch 14, CLIP mean/std,
// 56*56 .. 28*28*1280 pixels; a Qwen3-VL folder always names its own).
struct ImageProcessorConfig {
  // size.shortest_edge / size.longest_edge, overridden by top-level min_pixels / max_pixels.
  int64_t min_pixels = 65536;
  int64_t max_pixels = 16777216;
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  bool do_convert_rgb = true;  // images are RGB already (image::RgbImage); kept for completeness

  // Side multiple of a resized image: one merge window of patches.
  int factor() const { return patch_size * merge_size; }
};

// Parses the text of a preprocessor_config.json. `label` (the path) starts every error.
//
// Rules, as transformers' Qwen2VLImageProcessorFast (v4.57 .. v5) reads the file:
//   * pixel limits: `size` is {"shortest_edge": min, "longest_edge": max}; top-level `min_pixels`
//     and `max_pixels` (the Qwen2-VL style) override the matching entry of `size` when present.
//     Either may be absent; but a `size` object that lacks an entry no top-level key supplies is
//     refused (transformers raises "size must contain 'shortest_edge' and 'longest_edge'").
//     1 <= min_pixels <= max_pixels <= kMaxImageProcessorPixels.
//   * patch_size in [1, kMaxPatchSize], temporal_patch_size in [1, kMaxTemporalPatchSize],
//     merge_size in [1, kMaxMergeSize].
//   * image_mean / image_std: arrays of 3 finite numbers, |mean| <= 1e6, 1e-6 <= |std| <= 1e6;
//     rescale_factor a number in [1e-9, 1e9].
//   * resample: absent or 3 (bicubic); any other filter is kUnimplemented.
//   * do_resize / do_rescale / do_normalize / do_convert_rgb: booleans.
//   * null means absent (transformers writes None as null); other keys are ignored.
// Errors: kDataLoss when the text is not JSON (or repeats a key, or is not an object),
// kInvalidArgument for a bad value, kUnimplemented for a resample filter other than bicubic.
StatusOr<ImageProcessorConfig> ParseImageProcessorConfig(const std::string& json_text,
                                                         const std::string& label);

// Reads dir/preprocessor_config.json (at most kMaxPreprocessorConfigBytes). kNotFound when the
// file is absent: the caller decides whether defaults will do.
StatusOr<ImageProcessorConfig> LoadImageProcessorConfig(const std::string& dir);

}  // namespace vls

#endif  // VLSTACK_VISION_IMAGE_PROCESSOR_CONFIG_H_
