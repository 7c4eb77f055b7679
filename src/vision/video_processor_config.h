// video_preprocessor_config.json: how a video becomes pixel_values_videos (Qwen3VLVideoProcessor,
// transformers' video_processing_qwen3_vl.py; docs/contracts.md §D.6, docs/video.md "Video
// preprocessing").
#ifndef VLSTACK_VISION_VIDEO_PROCESSOR_CONFIG_H_
#define VLSTACK_VISION_VIDEO_PROCESSOR_CONFIG_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "vision/vision_config.h"

namespace vls {

// Bounds a config (and a request's sampling options) must keep; errors name the key.
inline constexpr int kMaxVideoFrames = 768 * 8;                        // frames sampled from a clip
inline constexpr int64_t kMaxVideoProcessorPixels = int64_t{1} << 31;  // size.* (t·h·w budgets)
inline constexpr double kMaxVideoSamplingFps = 1000.0;                 // fps (frames sampled / s)
inline constexpr size_t kMaxVideoPreprocessorConfigBytes = size_t{1} << 20;  // 1 MiB

// The defaults are Qwen3VLVideoProcessor's class defaults (transformers v4.57 .. v5), which is
// what transformers uses when a checkpoint ships no video_preprocessor_config.json. Checkpoints
// that ship one (every Qwen3-VL release) name size {"shortest_edge": 4096, "longest_edge":
// 25165824} there instead.
struct VideoProcessorConfig {
  // size.shortest_edge / size.longest_edge: the minimum and maximum pixel count of the WHOLE
  // sampled clip, t · h · w (not of one frame).
  int64_t min_pixels = 128 * 32 * 32;  // 131072
  int64_t max_pixels = 32 * 32 * 768;  // 786432
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  double fps = 2.0;  // frames sampled per second of video
  int min_frames = 4;
  int max_frames = 768;
  // A fixed count of frames to sample, used instead of fps sampling (the class default: none).
  std::optional<int> num_frames;
  // qwen-vl-utils' per-frame cap (video_preprocess.h, VideoResizedSize). transformers' None
  // means false until v5.22, which makes true the default.
  bool cap_pixels_per_frame = false;
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};  // IMAGENET_STANDARD_MEAN
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};   // IMAGENET_STANDARD_STD
  double rescale_factor = 1.0 / 255;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  bool do_sample_frames = true;
  bool do_convert_rgb = true;  // frames are RGB already (image::RgbImage); kept for completeness

  // Side multiple of a resized frame: one merge window of patches.
  int factor() const { return patch_size * merge_size; }
};

// Parses the text of a video_preprocessor_config.json. `label` (the path) starts every error.
//
// Keys honoured, as Qwen3VLVideoProcessor reads them:
//   * size: {"shortest_edge": min_pixels, "longest_edge": max_pixels}, both required when `size`
//     is given (transformers raises at resize time otherwise), each in [1,
//     kMaxVideoProcessorPixels], shortest_edge <= longest_edge. Top-level min_pixels /
//     max_pixels are ignored, as Qwen3VLVideoProcessor ignores them (Qwen2-VL's read them).
//   * patch_size in [1, kMaxPatchSize], temporal_patch_size in [1, kMaxTemporalPatchSize],
//     merge_size in [1, kMaxMergeSize] (image_processor_config.h); CheckVideoConfigAgainstVision
//     holds them to the vision tower's.
//   * fps: a number in (0, kMaxVideoSamplingFps]; min_frames and max_frames: integers in
//     [1, kMaxVideoFrames] with min_frames <= max_frames; num_frames: an integer in
//     [1, kMaxVideoFrames]; cap_pixels_per_frame: a boolean.
//   * image_mean / image_std: arrays of 3 finite numbers, |mean| <= 1e6, 1e-6 <= |std| <= 1e6;
//     rescale_factor a number in [1e-9, 1e9]; resample absent or 3 (bicubic), any other filter
//     kUnimplemented.
//   * do_resize / do_rescale / do_normalize / do_sample_frames / do_convert_rgb: booleans.
//   * null means absent (transformers writes None as null and then keeps the class default);
//     other keys (video_processor_type, processor_class, return_metadata, max_image_size, ...)
//     are ignored.
// Errors: kDataLoss when the text is not JSON (or repeats a key, or is not an object),
// kInvalidArgument for a bad value (naming the key), kUnimplemented for another resample filter.
StatusOr<VideoProcessorConfig> ParseVideoProcessorConfig(std::string_view json,
                                                         const std::string& label);

// Reads model_dir/video_preprocessor_config.json (at most kMaxVideoPreprocessorConfigBytes).
// When the file is absent, the class defaults above (VideoProcessorConfig{}), as transformers
// falls back to them; any other read error, or a bad file, is returned.
StatusOr<VideoProcessorConfig> LoadVideoProcessorConfig(const std::string& model_dir);

// InvalidArgument unless patch_size, temporal_patch_size and merge_size equal the vision
// tower's patch_size, temporal_patch_size and spatial_merge_size (the message names both keys).
Status CheckVideoConfigAgainstVision(const VideoProcessorConfig& cfg, const VisionConfig& vision);

}  // namespace vls

#endif  // VLSTACK_VISION_VIDEO_PROCESSOR_CONFIG_H_
