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

}  // namespace vls::processor_json

#endif  // VLSTACK_VISION_PROCESSOR_CONFIG_JSON_H_
