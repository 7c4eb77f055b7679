// ImageEncoder's videos (image_encoder.h): plan from the container header, decode the sampled
// frames, preprocess the clip, run the tower over its temporal groups.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "runtime/image_encoder.h"
#include "vision/video_preprocess.h"

namespace vls {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StatusOr<VideoPlan> ImageEncoder::PlanVideo(std::span<const uint8_t> bytes,
                                            const std::string& label,
                                            const VideoSamplingOptions& options) const {
  return PlanVideoBytes(bytes, label, video_processor_, options_, options);
}

StatusOr<VideoPlan> PlanVideoBytes(std::span<const uint8_t> bytes, const std::string& label,
                                   const VideoProcessorConfig& config,
                                   const ImageEncoderOptions& bounds,
                                   const VideoSamplingOptions& options) {
  VideoProcessorConfig cfg = config;
  if (options.fps &&
      (!std::isfinite(*options.fps) || *options.fps <= 0 || *options.fps > bounds.max_video_fps)) {
    return InvalidArgument("fps " + std::to_string(*options.fps) + " is outside (0, " +
                           std::to_string(bounds.max_video_fps) + "]")
        .WithParam("fps");
  }
  for (const auto& [name, value] :
       {std::pair{"max_frames", options.max_frames}, std::pair{"num_frames", options.num_frames}}) {
    if (value && (*value < 1 || *value > bounds.max_video_frames)) {
      return InvalidArgument(std::string(name) + " " + std::to_string(*value) + " is outside [1, " +
                             std::to_string(bounds.max_video_frames) + "]")
          .WithParam(name);
    }
  }
  cfg.max_frames = std::min(cfg.max_frames, bounds.max_video_frames);
  cfg.min_frames = std::min(cfg.min_frames, cfg.max_frames);
  if (cfg.num_frames) cfg.num_frames = std::min(*cfg.num_frames, bounds.max_video_frames);

  VideoPlan plan;
  VLS_ASSIGN_OR_RETURN(plan.info, video::ProbeVideo(bytes, label, bounds.video));
  auto indices = SampleFrameIndices(plan.info.frames, plan.info.fps, cfg, options);
  if (!indices.ok()) return indices.status().WithContext(label);
  plan.summary.frame_indices = std::move(*indices);
  const auto n = static_cast<int64_t>(plan.summary.frame_indices.size());
  auto size = VideoResizedSize(n, plan.info.height, plan.info.width, cfg);
  if (!size.ok()) return size.status().WithContext(label);
  plan.resized_height = size->first;
  plan.resized_width = size->second;
  auto grid = VideoGridThw(n, plan.info.height, plan.info.width, cfg);
  if (!grid.ok()) return grid.status().WithContext(label);
  plan.summary.grid = *grid;
  plan.summary.timestamps =
      VideoTimestamps(plan.summary.frame_indices, plan.info.fps, cfg.temporal_patch_size);
  plan.tokens = MergedTokens(*grid, cfg.merge_size);
  const int64_t patches = int64_t{grid->t} * grid->h * grid->w;
  if (patches > kMaxVisionPatches) {
    return InvalidArgument(
        label + ": " + std::to_string(n) + " frames at " + std::to_string(plan.resized_width) +
        "x" + std::to_string(plan.resized_height) + " make " + std::to_string(patches) +
        " patches, over the vision tower's " + std::to_string(kMaxVisionPatches) +
        " (ask for fewer frames: max_frames or fps)");
  }
  return plan;
}

StatusOr<std::shared_ptr<const EncodedImage>> ImageEncoder::EncodeVideo(
    std::span<const uint8_t> bytes, const std::string& label, const VideoSamplingOptions& options,
    const std::function<bool()>& cancelled) const {
  // The options are part of the key: the same clip sampled differently is another input.
  const std::string key = "video:" + Sha256Hex(bytes.data(), bytes.size()) + ":" +
                          (options.fps ? std::to_string(*options.fps) : "-") + ":" +
                          (options.max_frames ? std::to_string(*options.max_frames) : "-") + ":" +
                          (options.num_frames ? std::to_string(*options.num_frames) : "-");
  if (auto hit = Lookup(key)) return hit;
  VLS_ASSIGN_OR_RETURN(VideoPlan plan, PlanVideo(bytes, label, options));
  // Each frame is resized and placed as it is decoded (VideoPreprocessor), so only the pixel
  // values and one frame are held. A frame sampled twice (num_frames over the clip's frame
  // count) is decoded once and placed twice.
  const std::vector<int64_t>& sampled = plan.summary.frame_indices;
  std::vector<int64_t> unique;
  std::vector<int> copies;
  for (int64_t i : sampled) {
    if (unique.empty() || i != unique.back()) {
      unique.push_back(i);
      copies.push_back(0);
    }
    ++copies.back();
  }
  const auto frames = static_cast<int64_t>(sampled.size());
  VLS_ASSIGN_OR_RETURN(
      VideoPreprocessor pre,
      VideoPreprocessor::Create(frames, plan.info.height, plan.info.width, video_processor_));
  if (pre.grid() != plan.summary.grid) {
    return Internal(label + ": the preprocessor's grid " + GridToString(pre.grid()) +
                    " differs from the planned " + GridToString(plan.summary.grid));
  }
  double preprocess_s = 0;
  // Decoding is serial work beside the engine's steps, paced one frame at a time: the unit
  // running since the last frame ends with each frame placed, and the next one begins (waiting
  // for a window when the engine is stepping).
  std::optional<PoolPacer::Unit> unit(std::in_place, *pacer_);
  const video::FrameSink sink = [&](size_t k, const image::RgbImage& frame) -> Status {
    const auto t = std::chrono::steady_clock::now();
    for (int c = 0; c < copies[k]; ++c) VLS_RETURN_IF_ERROR(pre.Add(frame));
    preprocess_s += SecondsSince(t);
    unit.reset();
    unit.emplace(*pacer_);
    return Status::Ok();
  };
  auto t0 = std::chrono::steady_clock::now();
  VLS_RETURN_IF_ERROR(video::DecodeFramesTo(bytes, label, unique, sink, options_.video, cancelled));
  unit.reset();
  const double decode_s = SecondsSince(t0) - preprocess_s;
  auto pixels = pre.Finish();
  if (!pixels.ok()) return pixels.status().WithContext(label);
  if (cancelled && cancelled()) return Cancelled(label + ": the request was cancelled");
  t0 = std::chrono::steady_clock::now();
  VLS_ASSIGN_OR_RETURN(VisionOutput out, EncodeGroups(*pixels, label, cancelled));
  const double encode_s = SecondsSince(t0);
  CountVideo(static_cast<uint64_t>(frames), decode_s, preprocess_s, encode_s);
  auto enc = std::make_shared<EncodedImage>();
  enc->grid = plan.summary.grid;
  enc->tokens = out.tokens;
  enc->embeds = std::move(out.embeds);
  enc->deepstack = std::move(out.deepstack);
  enc->video = std::move(plan.summary);
  if (options_.cache_bytes > 0) Insert(key, enc);
  return std::shared_ptr<const EncodedImage>(std::move(enc));
}

StatusOr<VisionOutput> ImageEncoder::EncodeGroups(const PixelValues& pixels,
                                                  const std::string& label,
                                                  const std::function<bool()>& cancelled) const {
  // The tower attends within each temporal group and every other step is row-wise, so the clip
  // is encoded one group at a time: the same rows, in shorter loops, which the decode loop that
  // shares the thread pool waits on between its own (docs/video.md "The encoder").
  const GridThw& g = pixels.grids[0];
  const int64_t hw = int64_t{g.h} * g.w;
  const auto rows = static_cast<size_t>(hw * pixels.cols);
  const auto levels = static_cast<int64_t>(vision_->config().deepstack_visual_indexes.size());
  const int64_t per_group =
      MergedTokens(GridThw{1, g.h, g.w}, vision_->config().spatial_merge_size);
  VisionOutput all;
  all.tokens = per_group * g.t;
  all.embeds.resize(static_cast<size_t>(all.tokens * hidden_));
  all.deepstack.resize(static_cast<size_t>(levels * all.tokens * hidden_));
  const std::vector<GridThw> one = {GridThw{1, g.h, g.w}};
  const auto H = static_cast<size_t>(hidden_), n = static_cast<size_t>(per_group);
  for (int64_t t = 0; t < g.t; ++t) {
    if (cancelled && cancelled()) return Cancelled(label + ": the request was cancelled");
    const std::span<const float> px(pixels.data.data() + static_cast<size_t>(t) * rows, rows);
    auto out = vision_->Encode(px, hw, one, nullptr);
    if (!out.ok()) return out.status().WithContext(label);
    if (out->tokens != per_group || out->embeds.size() != n * H ||
        out->deepstack.size() != static_cast<size_t>(levels) * n * H) {
      return Internal(label + ": the vision tower returned rows of the wrong shape");
    }
    const size_t at = static_cast<size_t>(t) * n;
    std::copy(out->embeds.begin(), out->embeds.end(), all.embeds.begin() + at * H);
    for (size_t k = 0; k < static_cast<size_t>(levels); ++k) {  // [K, Nv, H]
      std::copy_n(out->deepstack.data() + k * n * H, n * H,
                  all.deepstack.data() + (k * static_cast<size_t>(all.tokens) + at) * H);
    }
  }
  return all;
}

void ImageEncoder::CountVideo(uint64_t frames, double decode_s, double preprocess_s,
                              double encode_s) const {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.videos;
  stats_.video_frames += frames;
  stats_.video_decode_seconds += decode_s;
  stats_.video_preprocess_seconds += preprocess_s;
  stats_.video_encode_seconds += encode_s;
}

}  // namespace vls
