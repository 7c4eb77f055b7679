// Strict reads of tokenizer.json fields (on io/untrusted_json.h's readers): a field that is
// absent or null keeps its default; any other value must have the expected JSON type, or the
// error names the field ("pre_tokenizer.behavior must be a string, not the integer 5").
#ifndef VLSTACK_TOKENIZER_JSON_FIELDS_H_
#define VLSTACK_TOKENIZER_JSON_FIELDS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/untrusted_json.h"
#include "tokenizer/tokenizer_limits.h"

namespace vls::tok {

// The value of `key` in object `obj`, or nullptr when it is absent or null.
// REQUIRES: obj.is_object().
inline const nlohmann::json* Field(const nlohmann::json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

inline std::string FieldName(std::string_view what, std::string_view key) {
  return std::string(what) + "." + std::string(key);
}

inline Status OptionalString(const nlohmann::json& obj, std::string_view what, std::string_view key,
                             std::string* out) {
  const nlohmann::json* v = Field(obj, key);
  return v == nullptr ? Status::Ok() : ReadJsonString(*v, FieldName(what, key), out);
}

inline Status OptionalBool(const nlohmann::json& obj, std::string_view what, std::string_view key,
                           bool* out) {
  const nlohmann::json* v = Field(obj, key);
  return v == nullptr ? Status::Ok() : ReadJsonBool(*v, FieldName(what, key), out);
}

// The "type" of a pipeline component, which must be an object.
inline Status ComponentType(const nlohmann::json& j, std::string_view what, std::string* type) {
  if (!j.is_object()) {
    return InvalidArgument(std::string(what) + " must be an object with a string \"type\", not " +
                           JsonTypeName(j));
  }
  const nlohmann::json* t = Field(j, "type");
  if (t == nullptr) return InvalidArgument(std::string(what) + " has no \"type\"");
  return ReadJsonString(*t, FieldName(what, "type"), type);
}

// Appends the steps of component `j` to `out`: `j` itself, or the steps of a {"type":
// "Sequence", list_key: [...]}, flattened, nesting at most kMaxSequenceNesting deep and giving at
// most kMaxPipelineSteps steps in all.
inline Status FlattenSequence(const nlohmann::json& j, std::string_view what,
                              std::string_view list_key, std::vector<const nlohmann::json*>* out,
                              int depth = 0) {
  std::string type;
  VLS_RETURN_IF_ERROR(ComponentType(j, what, &type));
  if (type != "Sequence") {
    if (out->size() >= static_cast<size_t>(kMaxPipelineSteps)) {
      return InvalidArgument(std::string(what) + " has more than " +
                             std::to_string(kMaxPipelineSteps) + " steps (kMaxPipelineSteps)");
    }
    out->push_back(&j);
    return Status::Ok();
  }
  if (depth >= kMaxSequenceNesting) {
    return InvalidArgument(std::string(what) + " Sequences nest deeper than " +
                           std::to_string(kMaxSequenceNesting) + " (kMaxSequenceNesting)");
  }
  const nlohmann::json* list = Field(j, list_key);
  if (list == nullptr || !list->is_array()) {
    return InvalidArgument(std::string(what) + " Sequence: \"" + std::string(list_key) +
                           "\" must be an array");
  }
  for (const nlohmann::json& e : *list) {
    VLS_RETURN_IF_ERROR(FlattenSequence(e, what, list_key, out, depth + 1));
  }
  return Status::Ok();
}

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_JSON_FIELDS_H_
