#include "vision/video_preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "vision/image_processor_config.h"
#include "vision/resize.h"
#include "vision/smart_resize.h"

namespace vls {
namespace {

std::string FrameName(size_t i) { return "video frame " + std::to_string(i); }

// The bounds ParseVideoProcessorConfig enforces, checked again for configs built in code, so
// that nothing below divides by zero or overflows.
Status CheckShapeConfig(const VideoProcessorConfig& cfg) {
  if (cfg.patch_size < 1 || cfg.patch_size > kMaxPatchSize || cfg.temporal_patch_size < 1 ||
      cfg.temporal_patch_size > kMaxTemporalPatchSize || cfg.merge_size < 1 ||
      cfg.merge_size > kMaxMergeSize) {
    return InvalidArgument("video processor config: patch_size " + std::to_string(cfg.patch_size) +
                           ", temporal_patch_size " + std::to_string(cfg.temporal_patch_size) +
                           ", merge_size " + std::to_string(cfg.merge_size) +
                           " outside the bounds ParseVideoProcessorConfig enforces");
  }
  if (cfg.min_pixels < 1 || cfg.min_pixels > cfg.max_pixels ||
      cfg.max_pixels > kMaxVideoProcessorPixels) {
    return InvalidArgument("video processor config: size.shortest_edge " +
                           std::to_string(cfg.min_pixels) + ", size.longest_edge " +
                           std::to_string(cfg.max_pixels) +
                           ": need 1 <= shortest_edge <= longest_edge <= 2^31");
  }
  return Status::Ok();
}

Status CheckSamplingConfig(const VideoProcessorConfig& cfg) {
  if (!(cfg.fps > 0 && cfg.fps <= kMaxVideoSamplingFps) || cfg.min_frames < 1 ||
      cfg.max_frames < cfg.min_frames || cfg.max_frames > kMaxVideoFrames ||
      (cfg.num_frames && (*cfg.num_frames < 1 || *cfg.num_frames > kMaxVideoFrames))) {
    return InvalidArgument("video processor config: fps " + std::to_string(cfg.fps) +
                           ", min_frames " + std::to_string(cfg.min_frames) + ", max_frames " +
                           std::to_string(cfg.max_frames) +
                           " outside the bounds ParseVideoProcessorConfig enforces");
  }
  return Status::Ok();
}

Status CheckOptions(const VideoSamplingOptions& o) {
  if (o.fps && o.num_frames) {
    return InvalidArgument(
        "video sampling: fps and num_frames are mutually exclusive; give only one");
  }
  if (o.fps && !(*o.fps > 0 && *o.fps <= kMaxVideoSamplingFps)) {
    return InvalidArgument("video sampling: fps " + std::to_string(*o.fps) + " must be in (0, " +
                           std::to_string(kMaxVideoSamplingFps) + "]");
  }
  if (o.num_frames && (*o.num_frames < 1 || *o.num_frames > kMaxVideoFrames)) {
    return InvalidArgument("video sampling: num_frames " + std::to_string(*o.num_frames) +
                           " must be in [1, " + std::to_string(kMaxVideoFrames) + "]");
  }
  if (o.max_frames && *o.max_frames < 1) {
    return InvalidArgument("video sampling: max_frames " + std::to_string(*o.max_frames) +
                           " must be at least 1");
  }
  return Status::Ok();
}

// numpy.linspace(0, stop, n).round().astype(int) for stop >= 0, n >= 1: numpy forms
// arange(n) * step with step = stop / (n - 1) in float64 (step 0 takes another path with the
// same zeros here), then sets the last element to stop; round() is rint, half to even.
std::vector<int64_t> RoundedLinspace(int64_t stop, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n), 0);
  if (n == 1) return out;
  const double step = static_cast<double>(stop) / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] =
        static_cast<int64_t>(RoundHalfToEven(static_cast<double>(i) * step));
  }
  out.back() = stop;
  return out;
}

Status CheckFrame(const image::RgbImage& im, size_t index) {
  if (im.width < 1 || im.height < 1 ||
      im.pixels.size() != 3 * static_cast<size_t>(im.width) * static_cast<size_t>(im.height)) {
    return InvalidArgument(FrameName(index) + ": " + std::to_string(im.width) + "x" +
                           std::to_string(im.height) + " pixels with " +
                           std::to_string(im.pixels.size()) +
                           " bytes: need width, height >= 1 and 3 bytes per pixel");
  }
  return Status::Ok();
}

// The image path run on one already-sized frame with temporal_patch_size 1: its rows are the
// frame's patches in merge-window order, its features (c, py, px), normalised as images are.
ImageProcessorConfig FrameConfig(const VideoProcessorConfig& cfg) {
  ImageProcessorConfig f;
  f.patch_size = cfg.patch_size;
  f.temporal_patch_size = 1;
  f.merge_size = cfg.merge_size;
  f.image_mean = cfg.image_mean;
  f.image_std = cfg.image_std;
  f.rescale_factor = cfg.rescale_factor;
  f.do_resize = false;
  f.do_rescale = cfg.do_rescale;
  f.do_normalize = cfg.do_normalize;
  return f;
}

// One frame's patches [h·w, 3·p²], resized to rh x rw first when its size differs (an
// unchanged size is not resampled, as torchvision's resize leaves it).
StatusOr<std::vector<float>> FramePatches(const image::RgbImage& in, int rh, int rw,
                                          const ImageProcessorConfig& frame_cfg, ThreadPool* pool,
                                          int64_t max_elements) {
  if (in.height == rh && in.width == rw) {
    VLS_ASSIGN_OR_RETURN(PixelValues pv, PreprocessImages({&in, 1}, frame_cfg, pool, max_elements));
    return std::move(pv.data);
  }
  const image::RgbImage resized = ResizeBicubicAntialias(in, rh, rw, pool);
  VLS_ASSIGN_OR_RETURN(PixelValues pv,
                       PreprocessImages({&resized, 1}, frame_cfg, pool, max_elements));
  return std::move(pv.data);
}

}  // namespace

StatusOr<std::vector<int64_t>> SampleFrameIndices(int64_t total_frames, double video_fps,
                                                  const VideoProcessorConfig& cfg,
                                                  const VideoSamplingOptions& options) {
  if (total_frames < 1 || total_frames > kMaxVideoTotalFrames) {
    return InvalidArgument("video of " + std::to_string(total_frames) +
                           " frames: the frame count must be in [1, 2^31]");
  }
  if (!std::isfinite(video_fps) || !(video_fps > 0)) {
    return InvalidArgument("video frame rate " + std::to_string(video_fps) +
                           ": must be a finite number of frames per second above 0");
  }
  VLS_RETURN_IF_ERROR(CheckSamplingConfig(cfg));
  if (!cfg.do_sample_frames) {
    if (total_frames > kMaxVideoFrames) {
      return InvalidArgument("video of " + std::to_string(total_frames) +
                             " frames: with do_sample_frames false every frame is kept, and at "
                             "most " +
                             std::to_string(kMaxVideoFrames) + " are allowed");
    }
    std::vector<int64_t> all(static_cast<size_t>(total_frames));
    for (int64_t i = 0; i < total_frames; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  VLS_RETURN_IF_ERROR(CheckOptions(options));
  std::optional<int> fixed = options.num_frames;
  if (!fixed && !options.fps) fixed = cfg.num_frames;
  int64_t n = 0;
  if (fixed) {
    n = *fixed;
  } else {
    const double fps = options.fps.value_or(cfg.fps);
    const int max_frames = std::min(cfg.max_frames, options.max_frames.value_or(cfg.max_frames));
    // int(total / metadata.fps * fps): Python's int() raises on infinity, so do we.
    const double x = std::trunc(static_cast<double>(total_frames) / video_fps * fps);
    if (!std::isfinite(x)) {
      return InvalidArgument("video of " + std::to_string(total_frames) + " frames at " +
                             std::to_string(video_fps) +
                             " frames per second: the sampled frame count overflows");
    }
    // min(max(n, min_frames), max_frames, total), in double so that a huge x stays exact enough.
    const double clamped =
        std::min({std::max(x, static_cast<double>(cfg.min_frames)), static_cast<double>(max_frames),
                  static_cast<double>(total_frames)});
    n = static_cast<int64_t>(clamped);
  }
  return RoundedLinspace(total_frames - 1, n);
}

StatusOr<std::pair<int, int>> VideoResizedSize(int64_t num_frames, int height, int width,
                                               const VideoProcessorConfig& cfg) {
  VLS_RETURN_IF_ERROR(CheckShapeConfig(cfg));
  const std::string dims = std::to_string(height) + "x" + std::to_string(width);
  if (num_frames < 1 || num_frames > kMaxVideoFrames) {
    return InvalidArgument("video of " + std::to_string(num_frames) +
                           " sampled frames: the count must be in [1, " +
                           std::to_string(kMaxVideoFrames) + "]");
  }
  if (height < 1 || width < 1 || height > kMaxSmartResizeSide || width > kMaxSmartResizeSide) {
    return InvalidArgument("video frames of " + dims +
                           " (height x width) pixels: each side must be in [1, " +
                           std::to_string(kMaxSmartResizeSide) + "]");
  }
  const int f = cfg.factor();
  if (!cfg.do_resize) {
    if (height % f != 0 || width % f != 0) {
      return InvalidArgument("video frames of " + dims +
                             " (height x width) pixels: with do_resize false both sides must "
                             "be multiples of patch_size * merge_size = " +
                             std::to_string(f));
    }
    return std::pair<int, int>(height, width);
  }
  const int tf = cfg.temporal_patch_size;
  if (num_frames < tf) {
    return InvalidArgument("video of " + std::to_string(num_frames) +
                           " sampled frames: smart_resize needs at least temporal_patch_size (" +
                           std::to_string(tf) + ") frames");
  }
  int64_t max_pixels = cfg.max_pixels;
  if (cfg.cap_pixels_per_frame) {
    // qwen-vl-utils' cap: 768 patches of f x f per frame, or the budget's share, floored at
    // int(shortest_edge * 1.05).
    const int64_t frame_cap = int64_t{768} * f * f;
    const auto floor_px = static_cast<int64_t>(static_cast<double>(cfg.min_pixels) * 1.05);
    const int64_t per_frame = std::max(std::min(frame_cap, cfg.max_pixels / num_frames), floor_px);
    max_pixels = per_frame * num_frames;  // < 2^34 * 2^13
  }
  // Python's ints and floats, step by step; every double here holds an integer below 2^53, or
  // is the correctly rounded quotient Python's int / int gives for such integers.
  const double fd = f;
  double h = height;
  double w = width;
  if (height < f || width < f) {
    const double scale = std::max(fd / h, fd / w);
    h = std::trunc(h * scale);
    w = std::trunc(w * scale);
  }
  if (!(std::min(h, w) >= 1) || std::max(h, w) / std::min(h, w) > kMaxSmartResizeAspectRatio) {
    return InvalidArgument("video frames of " + dims +
                           " (height x width) pixels: the aspect ratio must be at most 200:1");
  }
  // h, w <= max(2^24, 200 * 2^12) here, so T * h * w < 2^13 * 2^48 fits an int64.
  const int64_t thw = num_frames * static_cast<int64_t>(h) * static_cast<int64_t>(w);
  if (thw >= (int64_t{1} << 53)) {
    return InvalidArgument("video of " + std::to_string(num_frames) + " frames of " + dims +
                           " pixels: frames x height x width must stay below 2^53");
  }
  double h_bar = RoundHalfToEven(h / fd) * fd;
  double w_bar = RoundHalfToEven(w / fd) * fd;
  const double t_bar =
      RoundHalfToEven(static_cast<double>(num_frames) / static_cast<double>(tf)) * tf;
  // Python compares exact integers: t̄·h̄·w̄ < 2^13 · 2^25 · 2^25 fits an int64.
  const int64_t volume =
      static_cast<int64_t>(t_bar) * static_cast<int64_t>(h_bar) * static_cast<int64_t>(w_bar);
  if (volume > max_pixels) {
    const double beta = std::sqrt(static_cast<double>(thw) / static_cast<double>(max_pixels));
    h_bar = std::max(fd, std::floor(h / beta / fd) * fd);
    w_bar = std::max(fd, std::floor(w / beta / fd) * fd);
  } else if (volume < cfg.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(cfg.min_pixels) / static_cast<double>(thw));
    h_bar = std::ceil(h * beta / fd) * fd;
    w_bar = std::ceil(w * beta / fd) * fd;
  }
  constexpr double kMaxSide = 1 << 30;
  if (!(h_bar >= 1 && w_bar >= 1 && h_bar <= kMaxSide && w_bar <= kMaxSide)) {
    return InvalidArgument("video frames of " + dims + " pixels: smart_resize gives " +
                           std::to_string(h_bar) + "x" + std::to_string(w_bar) +
                           ", outside [1, 2^30] per side");
  }
  return std::pair<int, int>(static_cast<int>(h_bar), static_cast<int>(w_bar));
}

StatusOr<GridThw> VideoGridThw(int64_t num_frames, int height, int width,
                               const VideoProcessorConfig& cfg) {
  VLS_ASSIGN_OR_RETURN(auto size, VideoResizedSize(num_frames, height, width, cfg));
  const int gh = size.first / cfg.patch_size;
  const int gw = size.second / cfg.patch_size;
  if (gh > kMaxGridSide || gw > kMaxGridSide) {
    return InvalidArgument("video frames of " + std::to_string(height) + "x" +
                           std::to_string(width) + " pixels resize to a patch grid of " +
                           std::to_string(gh) + "x" + std::to_string(gw) + ", over kMaxGridSide (" +
                           std::to_string(kMaxGridSide) + ")");
  }
  const int64_t tp = cfg.temporal_patch_size;
  GridThw g{static_cast<int32_t>((num_frames + tp - 1) / tp), gh, gw};
  VLS_RETURN_IF_ERROR(ValidateGridThw(g, cfg.merge_size, "video grid"));
  return g;
}

std::vector<double> VideoTimestamps(std::span<const int64_t> indices, double video_fps,
                                    int temporal_patch_size) {
  std::vector<double> out;
  if (indices.empty() || temporal_patch_size < 1) return out;
  const size_t tp = static_cast<size_t>(temporal_patch_size);
  const size_t groups = (indices.size() + tp - 1) / tp;
  out.reserve(groups);
  for (size_t g = 0; g < groups; ++g) {
    // The padded list repeats the last index; a group's last element may be that repeat.
    const size_t first = g * tp;
    const size_t last = std::min(first + tp - 1, indices.size() - 1);
    const double t0 = static_cast<double>(indices[first]) / video_fps;
    const double t1 = static_cast<double>(indices[last]) / video_fps;
    out.push_back((t0 + t1) / 2);
  }
  return out;
}

std::string FormatTimestamp(double seconds) {
  const int n = std::snprintf(nullptr, 0, "<%.1f seconds>", seconds);
  if (n <= 0) return "<nan seconds>";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(s.data(), s.size(), "<%.1f seconds>", seconds);
  s.resize(static_cast<size_t>(n));
  return s;
}

StatusOr<VideoPreprocessor> VideoPreprocessor::Create(int64_t num_frames, int height, int width,
                                                      const VideoProcessorConfig& cfg,
                                                      int64_t max_elements) {
  VLS_RETURN_IF_ERROR(CheckShapeConfig(cfg));
  if (num_frames < 1) return InvalidArgument("video: no frames to preprocess");
  VLS_ASSIGN_OR_RETURN(GridThw g, VideoGridThw(num_frames, height, width, cfg));
  VideoPreprocessor v;
  v.cfg_ = cfg;
  v.frame_cfg_ = FrameConfig(cfg);
  v.frames_ = num_frames;
  v.height_ = height;
  v.width_ = width;
  const int64_t plane = int64_t{cfg.patch_size} * cfg.patch_size;
  const int64_t hw = int64_t{g.h} * g.w;
  v.pv_.cols = 3 * cfg.temporal_patch_size * plane;
  if (hw * g.t > max_elements / v.pv_.cols) {
    return InvalidArgument("video: pixel_values of " + std::to_string(hw * g.t) + " patches x " +
                           std::to_string(v.pv_.cols) + " would pass " +
                           std::to_string(max_elements) + " floats");
  }
  v.max_elements_ = max_elements;
  v.pv_.rows = hw * g.t;
  v.pv_.grids.push_back(g);
  v.pv_.data.resize(static_cast<size_t>(v.pv_.rows * v.pv_.cols));
  return v;
}

void VideoPreprocessor::Place(int64_t i) {
  const GridThw& g = pv_.grids[0];
  const int tp = cfg_.temporal_patch_size;
  const int64_t plane = int64_t{cfg_.patch_size} * cfg_.patch_size;
  const int64_t hw = int64_t{g.h} * g.w;
  const int64_t group = i / tp;
  const int64_t ti = i % tp;
  for (int64_t r = 0; r < hw; ++r) {
    const float* src = patches_.data() + r * 3 * plane;
    float* dst = pv_.data.data() + (group * hw + r) * pv_.cols;
    for (int64_t c = 0; c < 3; ++c) {
      std::copy(src + c * plane, src + (c + 1) * plane, dst + (c * tp + ti) * plane);
    }
  }
}

Status VideoPreprocessor::Add(const image::RgbImage& frame, ThreadPool* pool) {
  const auto i = static_cast<size_t>(added_);
  if (added_ == frames_) {
    return InvalidArgument(FrameName(i) + ": more frames than the " + std::to_string(frames_) +
                           " planned");
  }
  VLS_RETURN_IF_ERROR(CheckFrame(frame, i));
  if (frame.height != height_ || frame.width != width_) {
    return InvalidArgument(FrameName(i) + ": " + std::to_string(frame.width) + "x" +
                           std::to_string(frame.height) +
                           " pixels (width x height), but frame 0 is " + std::to_string(width_) +
                           "x" + std::to_string(height_) + ": a video's frames share a size");
  }
  const GridThw& g = pv_.grids[0];
  auto one = FramePatches(frame, g.h * cfg_.patch_size, g.w * cfg_.patch_size, frame_cfg_, pool,
                          max_elements_);
  if (!one.ok()) return one.status().WithContext(FrameName(i));
  patches_ = std::move(*one);
  Place(added_++);
  return Status::Ok();
}

StatusOr<PixelValues> VideoPreprocessor::Finish() {
  if (added_ != frames_) {
    return InvalidArgument("video: " + std::to_string(added_) + " frames given, " +
                           std::to_string(frames_) + " planned");
  }
  // The padding repeats the last frame.
  const int64_t padded = int64_t{pv_.grids[0].t} * cfg_.temporal_patch_size;
  for (int64_t i = frames_; i < padded; ++i) Place(i);
  patches_.clear();
  return std::move(pv_);
}

StatusOr<PixelValues> PreprocessVideo(std::span<const image::RgbImage> frames,
                                      const VideoProcessorConfig& cfg, ThreadPool* pool,
                                      int64_t max_elements) {
  VLS_RETURN_IF_ERROR(CheckShapeConfig(cfg));
  if (frames.empty()) return InvalidArgument("video: no frames to preprocess");
  VLS_RETURN_IF_ERROR(CheckFrame(frames[0], 0));
  VLS_ASSIGN_OR_RETURN(
      VideoPreprocessor v,
      VideoPreprocessor::Create(static_cast<int64_t>(frames.size()), frames[0].height,
                                frames[0].width, cfg, max_elements));
  for (const image::RgbImage& f : frames) VLS_RETURN_IF_ERROR(v.Add(f, pool));
  return v.Finish();
}

int64_t VideoTokensPerGroup(const GridThw& grid, const VideoProcessorConfig& cfg) {
  return int64_t{grid.h / cfg.merge_size} * (grid.w / cfg.merge_size);
}

}  // namespace vls
