#include "vision/image_processor_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/file.h"
#include "io/untrusted_json.h"
#include "vision/processor_config_json.h"

namespace vls {
namespace {

using Json = nlohmann::json;

using processor_json::Get;
using processor_json::ReadIntKey;
using processor_json::ReadOptionalInt;

// min_pixels / max_pixels from `size` and the top-level keys (the rule in the header).
Status ReadPixelLimits(const Json& root, const std::string& label, ImageProcessorConfig* cfg) {
  std::optional<int64_t> min_top, max_top, shortest, longest;
  const std::string prefix = label + ": ";
  VLS_RETURN_IF_ERROR(
      ReadOptionalInt(root, "min_pixels", prefix, 1, kMaxImageProcessorPixels, &min_top));
  VLS_RETURN_IF_ERROR(
      ReadOptionalInt(root, "max_pixels", prefix, 1, kMaxImageProcessorPixels, &max_top));
  if (const Json* size = Get(root, "size")) {
    if (!size->is_object()) {
      return InvalidArgument(label + ": size: expected an object {\"shortest_edge\": min_pixels, " +
                             "\"longest_edge\": max_pixels}, got " + JsonTypeName(*size));
    }
    const std::string size_prefix = label + ": size.";
    VLS_RETURN_IF_ERROR(ReadOptionalInt(*size, "shortest_edge", size_prefix, 1,
                                        kMaxImageProcessorPixels, &shortest));
    VLS_RETURN_IF_ERROR(
        ReadOptionalInt(*size, "longest_edge", size_prefix, 1, kMaxImageProcessorPixels, &longest));
    if ((!shortest && !min_top) || (!longest && !max_top)) {
      return InvalidArgument(label + ": size must contain 'shortest_edge' and 'longest_edge' " +
                             "(or the file must give min_pixels / max_pixels)");
    }
  }
  if (min_top) {
    cfg->min_pixels = *min_top;
  } else if (shortest) {
    cfg->min_pixels = *shortest;
  }
  if (max_top) {
    cfg->max_pixels = *max_top;
  } else if (longest) {
    cfg->max_pixels = *longest;
  }
  if (cfg->min_pixels > cfg->max_pixels) {
    return InvalidArgument(label + ": the minimum pixel count (" + std::to_string(cfg->min_pixels) +
                           ", size.shortest_edge or min_pixels) is above the maximum (" +
                           std::to_string(cfg->max_pixels) + ", size.longest_edge or max_pixels)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ImageProcessorConfig> ParseImageProcessorConfig(const std::string& json_text,
                                                         const std::string& label) {
  Json root;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, json_text, &root));
  if (!root.is_object()) {
    return DataLoss(label + ": expected a JSON object, got " + JsonTypeName(root));
  }
  ImageProcessorConfig cfg;
  VLS_RETURN_IF_ERROR(ReadPixelLimits(root, label, &cfg));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "patch_size", label, 1, kMaxPatchSize, &cfg.patch_size));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "temporal_patch_size", label, 1, kMaxTemporalPatchSize,
                                 &cfg.temporal_patch_size));
  VLS_RETURN_IF_ERROR(ReadIntKey(root, "merge_size", label, 1, kMaxMergeSize, &cfg.merge_size));
  VLS_RETURN_IF_ERROR(processor_json::ReadPixelKeys(root, label, &cfg));
  return cfg;
}

StatusOr<ImageProcessorConfig> LoadImageProcessorConfig(const std::string& dir) {
  const std::string path = JoinPath(dir, "preprocessor_config.json");
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileAtMost(path, kMaxPreprocessorConfigBytes));
  if (text.size() > kMaxPreprocessorConfigBytes) {
    return DataLoss(path + ": larger than " + std::to_string(kMaxPreprocessorConfigBytes) +
                    " bytes (kMaxPreprocessorConfigBytes)");
  }
  return ParseImageProcessorConfig(text, path);
}

}  // namespace vls
