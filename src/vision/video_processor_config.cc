#include "vision/video_processor_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/file.h"
#include "io/untrusted_json.h"
#include "vision/image_processor_config.h"
#include "vision/processor_config_json.h"

namespace vls {
namespace {

using Json = nlohmann::json;

using processor_json::Get;
using processor_json::ReadBoolKey;
using processor_json::ReadIntKey;
using processor_json::ReadOptionalInt;

// size: both entries or neither (Qwen3VLVideoProcessor.resize raises on a size without both).
Status ReadSize(const Json& root, const std::string& label, VideoProcessorConfig* cfg) {
  const Json* size = Get(root, "size");
  if (size == nullptr) return Status::Ok();
  if (!size->is_object()) {
    return InvalidArgument(label + ": size: expected an object {\"shortest_edge\": min_pixels, " +
                           "\"longest_edge\": max_pixels}, got " + JsonTypeName(*size));
  }
  std::optional<int64_t> shortest, longest;
  const std::string prefix = label + ": size.";
  VLS_RETURN_IF_ERROR(
      ReadOptionalInt(*size, "shortest_edge", prefix, 1, kMaxVideoProcessorPixels, &shortest));
  VLS_RETURN_IF_ERROR(
      ReadOptionalInt(*size, "longest_edge", prefix, 1, kMaxVideoProcessorPixels, &longest));
  if (!shortest || !longest) {
    return InvalidArgument(label +
                           ": size must contain 'shortest_edge' and 'longest_edge' (the minimum "
                           "and maximum pixel count of a sampled clip, t * h * w)");
  }
  if (*shortest > *longest) {
    return InvalidArgument(label + ": size.shortest_edge (" + std::to_string(*shortest) +
                           ") is above size.longest_edge (" + std::to_string(*longest) + ")");
  }
  cfg->min_pixels = *shortest;
  cfg->max_pixels = *longest;
  return Status::Ok();
}

Status ReadSampling(const Json& root, const std::string& label, VideoProcessorConfig* cfg) {
  if (const Json* v = Get(root, "fps")) {
    double fps = 0;
    VLS_RETURN_IF_ERROR(ReadJsonNumber(*v, label + ": fps", 0.0, kMaxVideoSamplingFps, &fps));
    if (!(fps > 0)) {
      return InvalidArgument(label + ": fps: " + JsonSnippet(*v) +
                             " must be above 0 (frames sampled per second of video)");
    }
    cfg->fps = fps;
  }
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "min_frames", label, 1, kMaxVideoFrames, &cfg->min_frames));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "max_frames", label, 1, kMaxVideoFrames, &cfg->max_frames));
  if (cfg->min_frames > cfg->max_frames) {
    return InvalidArgument(label + ": min_frames (" + std::to_string(cfg->min_frames) +
                           ") is above max_frames (" + std::to_string(cfg->max_frames) + ")");
  }
  int num_frames = 0;
  if (Get(root, "num_frames") != nullptr) {
    VLS_RETURN_IF_ERROR(ReadIntKey(root, "num_frames", label, 1, kMaxVideoFrames, &num_frames));
    cfg->num_frames = num_frames;
  }
  VLS_RETURN_IF_ERROR(ReadBoolKey(root, "cap_pixels_per_frame", label, &cfg->cap_pixels_per_frame));
  return ReadBoolKey(root, "do_sample_frames", label, &cfg->do_sample_frames);
}

}  // namespace

StatusOr<VideoProcessorConfig> ParseVideoProcessorConfig(std::string_view json,
                                                         const std::string& label) {
  Json root;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, json, &root));
  if (!root.is_object()) {
    return DataLoss(label + ": expected a JSON object, got " + JsonTypeName(root));
  }
  VideoProcessorConfig cfg;
  VLS_RETURN_IF_ERROR(ReadSize(root, label, &cfg));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "patch_size", label, 1, kMaxPatchSize, &cfg.patch_size));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "temporal_patch_size", label, 1, kMaxTemporalPatchSize,
                                 &cfg.temporal_patch_size));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "merge_size", label, 1, kMaxMergeSize, &cfg.merge_size));
  VLS_RETURN_IF_ERROR(ReadSampling(root, label, &cfg));
  VLS_RETURN_IF_ERROR(processor_json::ReadPixelKeys(root, label, &cfg));
  return cfg;
}

StatusOr<VideoProcessorConfig> LoadVideoProcessorConfig(const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, "video_preprocessor_config.json");
  auto text = ReadFileAtMost(path, kMaxVideoPreprocessorConfigBytes);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return VideoProcessorConfig{};
    return text.status();
  }
  if (text->size() > kMaxVideoPreprocessorConfigBytes) {
    return DataLoss(path + ": larger than " + std::to_string(kMaxVideoPreprocessorConfigBytes) +
                    " bytes (kMaxVideoPreprocessorConfigBytes)");
  }
  return ParseVideoProcessorConfig(*text, path);
}

Status CheckVideoConfigAgainstVision(const VideoProcessorConfig& cfg, const VisionConfig& vision) {
  const auto check = [](const char* key, int got, const char* vision_key, int want) -> Status {
    if (got == want) return Status::Ok();
    return InvalidArgument(std::string("video_preprocessor_config.json: ") + key + " " +
                           std::to_string(got) + " differs from config.json vision_config." +
                           vision_key + " " + std::to_string(want));
  };
  VLS_RETURN_IF_ERROR(check("patch_size", cfg.patch_size, "patch_size", vision.patch_size));
  VLS_RETURN_IF_ERROR(check("temporal_patch_size", cfg.temporal_patch_size, "temporal_patch_size",
                            vision.temporal_patch_size));
  return check("merge_size", cfg.merge_size, "spatial_merge_size", vision.spatial_merge_size);
}

}  // namespace vls
