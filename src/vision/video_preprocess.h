// A video -> sampled frame indices, pixel_values_videos, video_grid_thw and the per-group
// timestamps of the prompt, as transformers' Qwen3VLVideoProcessor (video_processing_qwen3_vl.py)
// and Qwen3VLProcessor._calculate_timestamps (processing_qwen3_vl.py) compute them
// (docs/contracts.md §D.6, docs/video.md "Video preprocessing").
//
// The steps a caller runs: SampleFrameIndices on the decoder's frame count and rate; decode those
// frames; PreprocessVideo on them; VideoTimestamps on the indices for the prompt text, each
// printed with FormatTimestamp. VideoGridThw plans the same grid without pixels.
//
// All functions are pure and thread-safe.
#ifndef VLSTACK_VISION_VIDEO_PREPROCESS_H_
#define VLSTACK_VISION_VIDEO_PREPROCESS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "image/image.h"
#include "tensor/grid_thw.h"
#include "vision/preprocess.h"
#include "vision/video_processor_config.h"

namespace vls {

// Largest frame count a video may declare (a day at 24 000 fps is below it).
inline constexpr int64_t kMaxVideoTotalFrames = int64_t{1} << 31;

// A request's overrides of the config's sampling.
struct VideoSamplingOptions {
  // Frames sampled per second; replaces cfg.fps (and cfg.num_frames). (0, kMaxVideoSamplingFps].
  std::optional<double> fps = std::nullopt;
  // An exact frame count, in [1, kMaxVideoFrames]; replaces cfg.num_frames and fps sampling.
  // Used as is, as transformers uses num_frames: not clamped by min/max_frames nor by the video's
  // frame count (more frames than the video has repeat indices). Exclusive with `fps`.
  std::optional<int> num_frames = std::nullopt;
  // Caps cfg.max_frames (the effective bound is the smaller); >= 1. As transformers' max_frames,
  // it bounds fps sampling only, not an explicit num_frames.
  std::optional<int> max_frames = std::nullopt;
};

// The indices (in [0, total_frames)) of the frames to decode, in order, as
// Qwen3VLVideoProcessor.sample_frames computes them:
//   fps sampling (no num_frames from the options or the config; fps = options.fps or cfg.fps):
//     n = int(total_frames / video_fps * fps)                     (double ops, truncation)
//     n = min(max(n, min_frames), max_frames, total_frames)
//   else n = options.num_frames or cfg.num_frames;
//   indices = numpy.linspace(0, total_frames - 1, n).round().astype(int): y[i] = i * step with
//     step = (total_frames - 1) / (n - 1) in double, the last element total_frames - 1 exactly,
//     [0] when n == 1, each rounded half to even.
// Without cfg.do_sample_frames every frame is kept: 0 .. total_frames - 1 (the options are
// ignored), and a video over kMaxVideoFrames frames is refused.
// InvalidArgument when total_frames is outside [1, kMaxVideoTotalFrames], video_fps is not a
// finite number > 0 (also needed by the timestamps; transformers assumes 24 when a video has no
// rate: the caller decides), both options.fps and options.num_frames are given, or an option is
// outside its range (the message names the option).
StatusOr<std::vector<int64_t>> SampleFrameIndices(int64_t total_frames, double video_fps,
                                                  const VideoProcessorConfig& cfg,
                                                  const VideoSamplingOptions& options = {});

// The size (H̄, W̄) every frame of a clip of `num_frames` sampled frames (before the temporal
// padding) of height x width pixels is resized to; (height, width) itself without do_resize.
// With do_resize, transformers' video smart_resize(num_frames, h, w, temporal_factor =
// temporal_patch_size, factor = patch_size * merge_size, min_pixels = cfg.min_pixels,
// max_pixels), in the same double operations:
//   max_pixels = cfg.max_pixels, or with cap_pixels_per_frame
//     max(min(768·f², cfg.max_pixels // num_frames), int(cfg.min_pixels · 1.05)) · num_frames
//   num_frames < temporal_factor: refused (transformers raises)
//   a side below f: scale = max(f / h, f / w); h = int(h · scale), w = int(w · scale)
//   max(h, w) / min(h, w) > 200: refused
//   h̄ = round(h / f)·f, w̄ = round(w / f)·f, t̄ = round(T / tf)·tf   (Python round: half to even)
//   if t̄·h̄·w̄ > max: β = sqrt(T·h·w / max); h̄ = max(f, floor(h / β / f)·f); w̄ likewise
//   elif t̄·h̄·w̄ < min: β = sqrt(min / (T·h·w)); h̄ = ceil(h · β / f)·f; w̄ likewise
// (the image SmartResize differs: no T, no early upscale). Without do_resize the sides must be
// positive multiples of f.
// InvalidArgument for all of the above, a side outside [1, kMaxSmartResizeSide], num_frames
// outside [1, kMaxVideoFrames], T·h·w >= 2^53 (where Python's exact integers and doubles would
// part), or a resized side over 2^30.
StatusOr<std::pair<int, int>> VideoResizedSize(int64_t num_frames, int height, int width,
                                               const VideoProcessorConfig& cfg);

// The patch grid PreprocessVideo gives `num_frames` sampled frames of height x width pixels:
// (ceil(num_frames / temporal_patch_size), H̄ / patch, W̄ / patch), validated by ValidateGridThw.
// Same errors as VideoResizedSize.
StatusOr<GridThw> VideoGridThw(int64_t num_frames, int height, int width,
                               const VideoProcessorConfig& cfg);

// The timestamp (seconds) of each temporal group, as Qwen3VLProcessor._calculate_timestamps:
// the indices padded to a multiple of temporal_patch_size by repeating the last one,
// ts[i] = index[i] / video_fps, and per group (ts[first] + ts[last]) / 2, in double.
// Returns ceil(indices.size() / temporal_patch_size) values; empty for no indices.
// REQUIRES: temporal_patch_size >= 1, video_fps finite and > 0 (SampleFrameIndices checks it).
std::vector<double> VideoTimestamps(std::span<const int64_t> indices, double video_fps,
                                    int temporal_patch_size);

// "<%.1f seconds>": the text Qwen3VLProcessor puts before each temporal group
// (f"<{t:.1f} seconds>"; C's %.1f and Python's format both round the exact binary value, half
// to even, so 0.25 gives "<0.2 seconds>" in both).
std::string FormatTimestamp(double seconds);

// One video's sampled frames (in order) -> PixelValues with one grid (T', H̄ / patch, W̄ / patch):
//   1. every frame resized to VideoResizedSize(frames.size(), H, W) with ResizeBicubicAntialias
//      when the size changes (the bicubic antialias of the image path);
//   2. rescaled and normalised exactly as PreprocessImages does (the fused float32 ops);
//   3. the frame count padded to a multiple of temporal_patch_size by repeating the last frame;
//   4. rows ordered (t', bh, bw, ih, iw) (the merge-window order of images, docs/contracts.md
//   §D.4),
//      features (c, tp, py, px): frame t'·temporal_patch_size + tp of the padded clip.
// InvalidArgument for no frames, an empty or inconsistent RgbImage or a frame whose size differs
// from frame 0 (naming the frame), the errors of VideoGridThw, or when the output would pass
// `max_elements` floats (the caller's memory budget; the default allows 2^31, 8 GiB). `pool`
// (may be null) parallelises the resizes.
StatusOr<PixelValues> PreprocessVideo(std::span<const image::RgbImage> frames,
                                      const VideoProcessorConfig& cfg, ThreadPool* pool = nullptr,
                                      int64_t max_elements = int64_t{1} << 31);

// PreprocessVideo one frame at a time (PreprocessVideo is Create, Add for each frame, Finish), so
// that a decoder can hand each frame over as it is decoded and only the output and one frame are
// held: Create plans the grid of `num_frames` frames of height x width pixels and allocates the
// output; Add resizes, normalises and places the next frame; Finish pads with the last frame and
// returns the pixel values. Same errors as PreprocessVideo; Add refuses a frame of another size
// or one more than planned, Finish fewer than planned.
class VideoPreprocessor {
 public:
  static StatusOr<VideoPreprocessor> Create(int64_t num_frames, int height, int width,
                                            const VideoProcessorConfig& cfg,
                                            int64_t max_elements = int64_t{1} << 31);
  Status Add(const image::RgbImage& frame, ThreadPool* pool = nullptr);
  StatusOr<PixelValues> Finish();
  const GridThw& grid() const { return pv_.grids[0]; }

 private:
  VideoPreprocessor() = default;
  void Place(int64_t i);  // the latest frame's patches as frame i of the padded clip

  VideoProcessorConfig cfg_;
  ImageProcessorConfig frame_cfg_;
  int64_t frames_ = 0, added_ = 0, max_elements_ = 0;
  int height_ = 0, width_ = 0;
  std::vector<float> patches_;  // [h·w, 3·p²]: the latest frame's
  PixelValues pv_;
};

// LLM tokens per temporal group of a video grid: (h / merge) · (w / merge). The prompt holds
// grid.t groups, each "<ts seconds><|vision_start|>" + this many <|video_pad|> + "<|vision_end|>".
int64_t VideoTokensPerGroup(const GridThw& grid, const VideoProcessorConfig& cfg);

}  // namespace vls

#endif  // VLSTACK_VISION_VIDEO_PREPROCESS_H_
