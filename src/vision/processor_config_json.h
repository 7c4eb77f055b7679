// The readers both processor configs (preprocessor_config.json, image_processor_config.h;
// video_preprocessor_config.json, video_processor_config.h) share: a key's value with null as
// absent (transformers keeps the class default for a None it reads), bounded integers, booleans
// and the three-number mean / std, each error naming the file and the key.
#ifndef VLSTACK_VISION_PROCESSOR_CONFIG_JSON_H_
#define VLSTACK_VISION_PROCESSOR_CONFIG_JSON_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"

namespace vls::processor_json {

// The value of `key` in `obj`, or nullptr when absent or null.
const nlohmann::json* Get(const nlohmann::json& obj, const char* key);

// An integer in [lo, hi] at `key`, left unset when absent; `prefix` + key names it in errors
// ("dir/preprocessor_config.json: size.").
Status ReadOptionalInt(const nlohmann::json& obj, const char* key, const std::string& prefix,
                       int64_t lo, int64_t hi, std::optional<int64_t>* out);

// An int in [lo, hi] or a boolean at `key`, `*out` left as it is when absent; `label` + ": " +
// key names it.
Status ReadIntKey(const nlohmann::json& obj, const char* key, const std::string& label, int lo,
                  int hi, int* out);
Status ReadBoolKey(const nlohmann::json& obj, const char* key, const std::string& label, bool* out);

// image_mean / image_std: three finite numbers with min_abs <= |x| <= max_abs.
Status ReadTriple(const nlohmann::json& obj, const char* key, const std::string& label,
                  double min_abs, double max_abs, std::array<float, 3>* out);

// The keys both configs read the same way: image_mean / image_std (ReadTriple), rescale_factor
// (a number in [1e-9, 1e9]), resample (absent or 3, bicubic; any other filter kUnimplemented) and
// do_resize / do_rescale / do_normalize / do_convert_rgb (booleans). `Config` has the fields of
// those names.
Status ReadResample(const nlohmann::json& obj, const std::string& label);
Status ReadRescaleFactor(const nlohmann::json& obj, const std::string& label, double* out);

template <class Config>
Status ReadPixelKeys(const nlohmann::json& obj, const std::string& label, Config* cfg) {
  VLS_RETURN_IF_ERROR(ReadTriple(obj, "image_mean", label, 0.0, 1e6, &cfg->image_mean));
  VLS_RETURN_IF_ERROR(ReadTriple(obj, "image_std", label, 1e-6, 1e6, &cfg->image_std));
  VLS_RETURN_IF_ERROR(ReadRescaleFactor(obj, label, &cfg->rescale_factor));
  VLS_RETURN_IF_ERROR(ReadResample(obj, label));
  VLS_RETURN_IF_ERROR(ReadBoolKey(obj, "do_resize", label, &cfg->do_resize));
  VLS_RETURN_IF_ERROR(ReadBoolKey(obj, "do_rescale", label, &cfg->do_rescale));
  VLS_RETURN_IF_ERROR(ReadBoolKey(obj, "do_normalize", label, &cfg->do_normalize));
  return ReadBoolKey(obj, "do_convert_rgb", label, &cfg->do_convert_rgb);
}

}  // namespace vls::processor_json

#endif  // VLSTACK_VISION_PROCESSOR_CONFIG_JSON_H_
