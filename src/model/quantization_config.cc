#include "model/quantization_config.h"

#include <nlohmann/json.hpp>

#include "io/untrusted_json.h"

namespace vls {
namespace {

using Json = nlohmann::json;

// The string value of key `k` of `o`, or nullopt when absent or null.
StatusOr<std::optional<std::string>> OptionalString(const Json& o, const std::string& where,
                                                    const char* k) {
  auto it = o.find(k);
  if (it == o.end() || it->is_null()) return std::optional<std::string>();
  std::string s;
  VLS_RETURN_IF_ERROR(ReadJsonString(*it, where + "." + k, &s));
  return std::optional<std::string>(std::move(s));
}

// Appends the module names listed under key `k` (absent or null: none).
Status ReadModuleList(const Json& o, const std::string& where, const char* k,
                      std::vector<std::string>* out) {
  auto it = o.find(k);
  if (it == o.end() || it->is_null()) return Status::Ok();
  const std::string key = where + "." + k;
  if (!it->is_array()) {
    return InvalidArgument(key + ": expected a list of module names, got " + JsonTypeName(*it));
  }
  if (out->size() + it->size() > kMaxFp8ExcludedModules) {
    return InvalidArgument(key + ": more than " + std::to_string(kMaxFp8ExcludedModules) +
                           " module names (kMaxFp8ExcludedModules)");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    std::string name;
    VLS_RETURN_IF_ERROR(ReadJsonString((*it)[i], item, &name));
    if (name.empty()) {
      return InvalidArgument(item + ": an empty module name (it would exclude every module)");
    }
    if (name.size() > kMaxFp8ModuleNameBytes) {
      return InvalidArgument(item + ": a module name of " + std::to_string(name.size()) +
                             " bytes, over " + std::to_string(kMaxFp8ModuleNameBytes) +
                             " (kMaxFp8ModuleNameBytes)");
    }
    out->push_back(std::move(name));
  }
  return Status::Ok();
}

// `name` with every run of decimal digits replaced by one '*' (Hugging Face's re.sub(r"\d+",
// "*", name)).
std::string StarDigits(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (size_t i = 0; i < name.size(); ++i) {
    const bool digit = name[i] >= '0' && name[i] <= '9';
    if (!digit) {
      out.push_back(name[i]);
    } else if (i == 0 || !(name[i - 1] >= '0' && name[i - 1] <= '9')) {
      out.push_back('*');
    }
  }
  return out;
}

}  // namespace

StatusOr<std::optional<Fp8Quantization>> ParseQuantizationConfig(const Json& v,
                                                                 const std::string& where) {
  if (v.is_null()) return std::optional<Fp8Quantization>();
  if (!v.is_object()) {
    return InvalidArgument(where + ": expected an object, got " + JsonTypeName(v));
  }
  VLS_ASSIGN_OR_RETURN(std::optional<std::string> method, OptionalString(v, where, "quant_method"));
  if (!method) return InvalidArgument(where + ".quant_method: required key is missing");
  if (*method != "fp8") {
    return Unimplemented(where + ".quant_method: " + JsonSnippet(Json(*method)) +
                         " is not supported (vlstack loads quant_method \"fp8\": E4M3 weights "
                         "with block-wise weight_scale_inv)");
  }
  VLS_ASSIGN_OR_RETURN(std::optional<std::string> fmt, OptionalString(v, where, "fmt"));
  if (fmt && *fmt != "e4m3") {
    return Unimplemented(where + ".fmt: " + JsonSnippet(Json(*fmt)) +
                         " is not supported (e4m3 only)");
  }
  VLS_ASSIGN_OR_RETURN(std::optional<std::string> scheme,
                       OptionalString(v, where, "activation_scheme"));
  if (scheme && *scheme != "dynamic") {
    return Unimplemented(where + ".activation_scheme: " + JsonSnippet(Json(*scheme)) +
                         " is not supported (dynamic only: static per-tensor activation "
                         "scales are not implemented)");
  }
  Fp8Quantization q;
  auto block = v.find("weight_block_size");
  if (block == v.end() || block->is_null()) {
    return Unimplemented(where +
                         ".weight_block_size: missing; FP8 without block scales (per-tensor "
                         "weight_scale) is not supported");
  }
  if (!block->is_array() || block->size() != 2) {
    return InvalidArgument(where + ".weight_block_size: expected a list of 2 integers [rows, " +
                           "cols], got " + JsonSnippet(*block));
  }
  VLS_RETURN_IF_ERROR(ReadJsonInt((*block)[0], where + ".weight_block_size[0]", 1, kMaxFp8BlockSize,
                                  &q.block_rows));
  VLS_RETURN_IF_ERROR(ReadJsonInt((*block)[1], where + ".weight_block_size[1]", 1, kMaxFp8BlockSize,
                                  &q.block_cols));
  VLS_RETURN_IF_ERROR(ReadModuleList(v, where, "modules_to_not_convert", &q.excluded_modules));
  VLS_RETURN_IF_ERROR(ReadModuleList(v, where, "ignored_layers", &q.excluded_modules));
  return std::optional<Fp8Quantization>(std::move(q));
}

bool Fp8ModuleExcluded(const Fp8Quantization& q, std::string_view weight_name,
                       std::string* matched) {
  const std::string starred = StarDigits(weight_name);
  for (const std::string& key : q.excluded_modules) {
    if (starred.find(key) != std::string::npos || weight_name.find(key) != std::string_view::npos) {
      if (matched != nullptr) *matched = key;
      return true;
    }
  }
  return false;
}

std::string CanonicalQuantizationText(const Fp8Quantization& q) {
  std::string s = "quantization=fp8 e4m3 block " + std::to_string(q.block_rows) + "x" +
                  std::to_string(q.block_cols) + " activation dynamic excluded ";
  for (size_t i = 0; i < q.excluded_modules.size(); ++i) {
    // JSON quoting keeps a name holding ',' or a newline from changing the line's meaning.
    s += (i ? "," : "") + DumpJsonSafe(Json(q.excluded_modules[i]));
  }
  return s + "\n";
}

}  // namespace vls
