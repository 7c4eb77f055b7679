#include "vision/processor_config_json.h"

#include <cmath>

#include "io/untrusted_json.h"

namespace vls::processor_json {

using Json = nlohmann::json;

const Json* Get(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Status ReadOptionalInt(const Json& obj, const char* key, const std::string& prefix, int64_t lo,
                       int64_t hi, std::optional<int64_t>* out) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return Status::Ok();
  int64_t x = 0;
  VLS_RETURN_IF_ERROR(ReadJsonInt(*v, prefix + key, lo, hi, &x));
  *out = x;
  return Status::Ok();
}

Status ReadIntKey(const Json& obj, const char* key, const std::string& label, int lo, int hi,
                  int* out) {
  std::optional<int64_t> x;
  VLS_RETURN_IF_ERROR(ReadOptionalInt(obj, key, label + ": ", lo, hi, &x));
  if (x) *out = static_cast<int>(*x);
  return Status::Ok();
}

Status ReadBoolKey(const Json& obj, const char* key, const std::string& label, bool* out) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return Status::Ok();
  return ReadJsonBool(*v, label + ": " + key, out);
}

Status ReadTriple(const Json& obj, const char* key, const std::string& label, double min_abs,
                  double max_abs, std::array<float, 3>* out) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array() || v->size() != 3) {
    return InvalidArgument(label + ": " + key + ": expected an array of 3 numbers (R, G, B), got " +
                           JsonSnippet(*v));
  }
  for (size_t c = 0; c < 3; ++c) {
    const std::string what = label + ": " + key + "[" + std::to_string(c) + "]";
    double x = 0;
    VLS_RETURN_IF_ERROR(ReadJsonNumber((*v)[c], what, -max_abs, max_abs, &x));
    if (std::fabs(x) < min_abs) {
      return InvalidArgument(what + ": " + JsonSnippet((*v)[c]) + " is too close to zero (|x| >= " +
                             std::to_string(min_abs) + " required)");
    }
    (*out)[c] = static_cast<float>(x);
  }
  return Status::Ok();
}

Status ReadRescaleFactor(const Json& obj, const std::string& label, double* out) {
  const Json* v = Get(obj, "rescale_factor");
  if (v == nullptr) return Status::Ok();
  return ReadJsonNumber(*v, label + ": rescale_factor", 1e-9, 1e9, out);
}

Status ReadResample(const Json& obj, const std::string& label) {
  const Json* v = Get(obj, "resample");
  if (v == nullptr) return Status::Ok();
  int64_t r = 0;
  VLS_RETURN_IF_ERROR(ReadJsonInt(*v, label + ": resample", 0, 255, &r));
  if (r != 3) {
    return Status(StatusCode::kUnimplemented,
                  label + ": resample: filter " + std::to_string(r) +
                      " is not supported; only 3 (bicubic, what Qwen-VL ships) is");
  }
  return Status::Ok();
}

}  // namespace vls::processor_json
