// JSON Schema to grammar (json_schema.h): the keyword check, $ref resolution, allOf merging and
// anyOf/oneOf, and the dispatch by type. The types' rules are in json_schema_types.cc, the JSON
// lexical rules in json_schema_json.cc.
//
// Semantics worth knowing (docs/structured_output.md):
//   * properties are written in schema order; required ones must appear, optional ones may be
//     left out; keys of additionalProperties come after them;
//   * oneOf is compiled as anyOf (a value matching several branches is not refused);
//   * allOf, and keywords beside anyOf/oneOf, are merged only where that is trivial (disjoint
//     keywords, equal values, bounds and required lists); otherwise the keyword is refused;
//   * $ref takes local JSON pointers ("#", "#/$defs/x", "#/definitions/x", any "#/..."),
//     recursion included; a keyword beside $ref other than an annotation or $defs is refused;
//   * annotations (title, description, ...) are ignored by a list; any other keyword outside
//     the subset is refused: `unsupported keyword "X" at /json/pointer`.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grammar/json_schema_internal.h"
#include "io/untrusted_json.h"

namespace vls::grammar {
namespace json_schema_internal {
namespace {

const std::set<std::string, std::less<>>& Annotations() {
  static const auto* kSet = new std::set<std::string, std::less<>>{
      "title", "description", "examples",   "default",  "$schema",
      "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
  return *kSet;
}

const std::set<std::string, std::less<>>& Supported() {
  static const auto* kSet = new std::set<std::string, std::less<>>{"type",
                                                                   "properties",
                                                                   "required",
                                                                   "additionalProperties",
                                                                   "items",
                                                                   "prefixItems",
                                                                   "additionalItems",
                                                                   "minItems",
                                                                   "maxItems",
                                                                   "enum",
                                                                   "const",
                                                                   "anyOf",
                                                                   "oneOf",
                                                                   "allOf",
                                                                   "$ref",
                                                                   "$defs",
                                                                   "definitions",
                                                                   "pattern",
                                                                   "format",
                                                                   "minLength",
                                                                   "maxLength",
                                                                   "minimum",
                                                                   "maximum",
                                                                   "exclusiveMinimum",
                                                                   "exclusiveMaximum",
                                                                   "uniqueItems"};
  return *kSet;
}

}  // namespace

bool IsAnnotationKeyword(std::string_view k) { return Annotations().count(k) != 0; }

Status SchemaCompiler::CheckKeywords(const Json& s, const std::string& path) const {
  for (const auto& [k, v] : s.items()) {
    if (IsAnnotationKeyword(k)) continue;
    if (Supported().count(k) == 0) {
      return InvalidArgument("unsupported keyword \"" + k + "\" " + At(path));
    }
  }
  if (s.contains("uniqueItems") && s["uniqueItems"] != Json(false)) {
    return InvalidArgument("unsupported keyword \"uniqueItems\" " + At(path) +
                           " (only uniqueItems: false)");
  }
  return Status::Ok();
}

Status SchemaCompiler::CheckSize() const {
  if (b_->rule_count() > limits_.max_rules) {
    return ResourceExhausted("json_schema: the grammar needs more than " +
                             std::to_string(limits_.max_rules) + " rules");
  }
  if (b_->element_count() > limits_.max_elements) {
    return ResourceExhausted("json_schema: the grammar needs more than " +
                             std::to_string(limits_.max_elements) + " elements");
  }
  return Status::Ok();
}

StatusOr<const Json*> SchemaCompiler::Resolve(const std::string& ref,
                                              const std::string& path) const {
  if (ref.empty() || ref[0] != '#') {
    return InvalidArgument("unsupported \"$ref\" \"" + ref + "\" " + At(path) +
                           " (only local references \"#/...\")");
  }
  // Percent-decoding, then the JSON pointer.
  std::string ptr;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() + 0 && isxdigit(ref[i + 1]) && isxdigit(ref[i + 2])) {
      ptr += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      ptr += ref[i];
    }
  }
  if (!ptr.empty() && ptr[0] != '/') {
    return InvalidArgument("unsupported \"$ref\" \"" + ref + "\" " + At(path) +
                           " (anchors are not supported; use a JSON pointer \"#/...\")");
  }
  const Json* node = &root_;
  size_t pos = 0;
  while (pos < ptr.size()) {
    const size_t next = ptr.find('/', pos + 1);
    std::string token =
        ptr.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    pos = next == std::string::npos ? ptr.size() : next;
    std::string key;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
        key += token[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        key += token[i];
      }
    }
    if (node->is_object() && node->contains(key)) {
      node = &(*node)[key];
    } else if (node->is_array() && !key.empty() &&
               key.find_first_not_of("0123456789") == std::string::npos && key.size() < 9 &&
               std::stoul(key) < node->size()) {
      node = &(*node)[std::stoul(key)];
    } else {
      return InvalidArgument("unresolved \"$ref\" \"" + ref + "\" " + At(path));
    }
  }
  return node;
}

StatusOr<int32_t> SchemaCompiler::RefRule(const Json& s, const std::string& path, int depth) {
  if (!s["$ref"].is_string()) {
    return InvalidArgument("invalid \"$ref\" " + At(path) + ": expected a string");
  }
  for (const auto& [k, v] : s.items()) {
    if (k != "$ref" && k != "$defs" && k != "definitions" && !IsAnnotationKeyword(k)) {
      return InvalidArgument("keyword \"" + k + "\" beside \"$ref\" is not supported " + At(path));
    }
  }
  const std::string ref = s["$ref"].get<std::string>();
  VLS_ASSIGN_OR_RETURN(const Json* target, Resolve(ref, PointerChild(path, "$ref")));
  const std::string key = ref == "#" ? "#" : ref;
  auto it = refs_.find(key);
  if (it != refs_.end()) return it->second;
  const int32_t rule = b_->AddRule(prefix_ + "-ref");
  refs_[key] = rule;
  VLS_ASSIGN_OR_RETURN(const int32_t body, Visit(*target, ref.substr(1), depth + 1));
  if (body == kNone) {
    return InvalidArgument("the schema of \"$ref\" \"" + ref + "\" " + At(path) +
                           " accepts no value");
  }
  b_->SetAlternatives(rule, {{Ref(body)}});
  return rule;
}

// A $ref (non-recursive chains only) replaced by its target, for merging.
StatusOr<Json> SchemaCompiler::Inline(const Json& s, const std::string& path) const {
  Json cur = s;
  for (int hops = 0; cur.is_object() && cur.contains("$ref"); ++hops) {
    if (hops >= 16) {
      return InvalidArgument("\"$ref\" chain too long to merge " + At(path));
    }
    for (const auto& [k, v] : cur.items()) {
      if (k != "$ref" && k != "$defs" && k != "definitions" && !IsAnnotationKeyword(k)) {
        return InvalidArgument("keyword \"" + k + "\" beside \"$ref\" is not supported " +
                               At(path));
      }
    }
    if (!cur["$ref"].is_string()) {
      return InvalidArgument("invalid \"$ref\" " + At(path) + ": expected a string");
    }
    VLS_ASSIGN_OR_RETURN(const Json* t, Resolve(cur["$ref"].get<std::string>(), path));
    cur = *t;
  }
  return cur;
}

StatusOr<Json> SchemaCompiler::Merge(const Json& a_in, const Json& b_in, const std::string& path,
                                     int depth) const {
  if (depth > limits_.max_nesting) {
    return InvalidArgument("schema nests deeper than the limit of " +
                           std::to_string(limits_.max_nesting) + " " + At(path));
  }
  VLS_ASSIGN_OR_RETURN(Json a, Inline(a_in, path));
  VLS_ASSIGN_OR_RETURN(Json b, Inline(b_in, path));
  if (a.is_boolean() || b.is_boolean()) {
    if (a == Json(false) || b == Json(false)) return Json(false);
    return a.is_boolean() ? b : a;
  }
  if (!a.is_object() || !b.is_object()) {
    return InvalidArgument("invalid schema " + At(path) + ": expected an object or a boolean");
  }
  VLS_RETURN_IF_ERROR(CheckKeywords(a, path));
  VLS_RETURN_IF_ERROR(CheckKeywords(b, path));
  // additionalProperties on one side makes the other side's extra properties its concern.
  for (const auto* pair : {&a, &b}) {
    const Json& self = *pair;
    const Json& other = pair == &a ? b : a;
    if (self.contains("additionalProperties") && self["additionalProperties"] != Json(true) &&
        other.contains("properties") && other["properties"].is_object()) {
      for (const auto& [k, v] : other["properties"].items()) {
        if (!self.contains("properties") || !self["properties"].is_object() ||
            !self["properties"].contains(k)) {
          return InvalidArgument("allOf: keyword \"additionalProperties\" " + At(path) +
                                 " cannot be merged with property \"" + k + "\" of a sibling");
        }
      }
    }
  }
  Json out = a;
  for (const auto& [k, v] : b.items()) {
    if (IsAnnotationKeyword(k) || k == "$defs" || k == "definitions") continue;
    if (!out.contains(k)) {
      out[k] = v;
      continue;
    }
    Json& mine = out[k];
    if (mine == v) continue;
    if (k == "properties" && mine.is_object() && v.is_object()) {
      for (const auto& [pk, pv] : v.items()) {
        if (mine.contains(pk)) {
          VLS_ASSIGN_OR_RETURN(
              mine[pk], Merge(mine[pk], pv, PointerChild(PointerChild(path, k), pk), depth + 1));
        } else {
          mine[pk] = pv;
        }
      }
    } else if (k == "required" && mine.is_array() && v.is_array()) {
      for (const Json& r : v) {
        if (std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
      }
    } else if (k == "type") {
      auto as_set = [](const Json& t) {
        std::set<std::string> s;
        if (t.is_string()) s.insert(t.get<std::string>());
        if (t.is_array()) {
          for (const Json& x : t) {
            if (x.is_string()) s.insert(x.get<std::string>());
          }
        }
        return s;
      };
      const std::set<std::string> x = as_set(mine);
      const std::set<std::string> y = as_set(v);
      Json both = Json::array();
      for (const std::string& t : x) {
        if (y.count(t) || (t == "integer" && y.count("number"))) both.push_back(t);
      }
      for (const std::string& t : y) {
        if (t == "integer" && x.count("number") && !x.count("integer")) both.push_back(t);
      }
      if (both.empty()) return Json(false);
      mine = both;
    } else if ((k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") &&
               mine.is_number() && v.is_number()) {
      if (v > mine) mine = v;
    } else if ((k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") &&
               mine.is_number() && v.is_number()) {
      if (v < mine) mine = v;
    } else {
      return InvalidArgument("allOf: keyword \"" + k + "\" differs between the schemas merged " +
                             At(path));
    }
  }
  return out;
}

StatusOr<int32_t> SchemaCompiler::Visit(const Json& schema, const std::string& path, int depth) {
  if (depth > limits_.max_nesting) {
    return InvalidArgument("schema nests deeper than the limit of " +
                           std::to_string(limits_.max_nesting) + " " + At(path));
  }
  if ((++visits_ & 63) == 0) VLS_RETURN_IF_ERROR(CheckSize());
  if (b_->rule_count() > limits_.max_rules) VLS_RETURN_IF_ERROR(CheckSize());
  if (schema.is_boolean()) return schema.get<bool>() ? AnyValue() : kNone;
  if (!schema.is_object()) {
    return InvalidArgument("invalid schema " + At(path) + ": expected an object or a boolean");
  }
  VLS_RETURN_IF_ERROR(CheckKeywords(schema, path));
  if (schema.contains("$ref")) return RefRule(schema, path, depth);

  if (schema.contains("allOf")) {
    const Json& all = schema["allOf"];
    if (!all.is_array() || all.empty()) {
      return InvalidArgument("invalid \"allOf\" " + At(path) + ": expected a non-empty array");
    }
    Json merged = schema;
    merged.erase("allOf");
    for (size_t i = 0; i < all.size(); ++i) {
      VLS_ASSIGN_OR_RETURN(
          merged, Merge(merged, all[i],
                        PointerChild(PointerChild(path, "allOf"), std::to_string(i)), depth + 1));
    }
    return Visit(merged, path, depth + 1);
  }

  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    const Json& branches = schema[key];
    if (!branches.is_array() || branches.empty()) {
      return InvalidArgument("invalid \"" + std::string(key) + "\" " + At(path) +
                             ": expected a non-empty array");
    }
    Json siblings = schema;
    siblings.erase(key);
    bool plain = true;
    for (const auto& [k, v] : siblings.items()) {
      if (!IsAnnotationKeyword(k) && k != "$defs" && k != "definitions") plain = false;
    }
    std::vector<Sequence> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      const std::string bpath = PointerChild(PointerChild(path, key), std::to_string(i));
      int32_t r = kNone;
      if (plain) {
        VLS_ASSIGN_OR_RETURN(r, Visit(branches[i], bpath, depth + 1));
      } else {
        VLS_ASSIGN_OR_RETURN(const Json merged, Merge(siblings, branches[i], bpath, depth + 1));
        VLS_ASSIGN_OR_RETURN(r, Visit(merged, bpath, depth + 1));
      }
      if (r != kNone) alts.push_back({Ref(r)});
    }
    if (alts.empty()) return kNone;
    return NewRule(key, std::move(alts));
  }

  if (schema.contains("enum") || schema.contains("const")) return EnumRule(schema, path);

  // The types the value may take; each with the keywords that apply to it.
  std::vector<std::string> types;
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    auto add = [&](const Json& x) -> Status {
      static const std::set<std::string, std::less<>> kTypes = {
          "null", "boolean", "object", "array", "string", "number", "integer"};
      if (!x.is_string() || kTypes.count(x.get<std::string>()) == 0) {
        return InvalidArgument("invalid \"type\" " + At(path) + ": " + JsonSnippet(x));
      }
      if (std::find(types.begin(), types.end(), x.get<std::string>()) == types.end()) {
        types.push_back(x.get<std::string>());
      }
      return Status::Ok();
    };
    if (t.is_array()) {
      for (const Json& x : t) VLS_RETURN_IF_ERROR(add(x));
    } else {
      VLS_RETURN_IF_ERROR(add(t));
    }
  } else {
    types = {"object", "array", "string", "number", "boolean", "null"};
  }
  const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
  std::vector<Sequence> alts;
  for (const std::string& t : types) {
    int32_t r = kNone;
    if (t == "null") {
      alts.push_back(Lit("null"));
      continue;
    }
    if (t == "boolean") {
      alts.push_back(Lit("true"));
      alts.push_back(Lit("false"));
      continue;
    }
    if (t == "object") {
      VLS_ASSIGN_OR_RETURN(r, ObjectRule(schema, path, depth));
    } else if (t == "array") {
      VLS_ASSIGN_OR_RETURN(r, ArrayRule(schema, path, depth));
    } else if (t == "string") {
      VLS_ASSIGN_OR_RETURN(r, StringRule(schema, path));
    } else if (t == "number") {
      VLS_ASSIGN_OR_RETURN(r, NumberRule(schema, path, /*integer=*/false));
    } else if (t == "integer") {
      if (has_number) continue;
      VLS_ASSIGN_OR_RETURN(r, NumberRule(schema, path, /*integer=*/true));
    }
    if (r != kNone) alts.push_back({Ref(r)});
  }
  if (alts.empty()) return kNone;
  if (alts.size() == 1 && alts[0].size() == 1 && alts[0][0].kind == Element::Kind::kRule) {
    return alts[0][0].index;
  }
  return NewRule("typed", std::move(alts));
}

}  // namespace json_schema_internal

using json_schema_internal::Json;
using json_schema_internal::kNone;
using json_schema_internal::SchemaCompiler;

namespace {

// Depth and an estimate of the serialised size, without recursion.
Status MeasureSchema(const Json& schema, const GrammarLimits& limits) {
  const int max_depth = 2 * limits.max_nesting + 4;
  std::vector<std::pair<const Json*, int>> stack = {{&schema, 1}};
  size_t bytes = 0;
  while (!stack.empty()) {
    auto [j, depth] = stack.back();
    stack.pop_back();
    if (depth > max_depth) {
      return InvalidArgument("json_schema: JSON nests deeper than " + std::to_string(max_depth) +
                             " levels (the limit of " + std::to_string(limits.max_nesting) +
                             " schema levels)");
    }
    bytes += 4;
    if (j->is_string()) bytes += j->get_ref<const std::string&>().size();
    if (j->is_object()) {
      for (const auto& [k, v] : j->items()) {
        bytes += k.size() + 4;
        stack.emplace_back(&v, depth + 1);
      }
    } else if (j->is_array()) {
      for (const Json& v : *j) stack.emplace_back(&v, depth + 1);
    }
    if (bytes > limits.max_source_bytes) {
      return ResourceExhausted("json_schema: the schema is over the limit of " +
                               std::to_string(limits.max_source_bytes) + " bytes");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int32_t> AddJsonSchemaRule(GrammarBuilder* builder, const nlohmann::ordered_json& schema,
                                    std::string_view rule_name, const JsonSchemaOptions& options,
                                    const GrammarLimits& limits) {
  VLS_RETURN_IF_ERROR(MeasureSchema(schema, limits));
  const int32_t rule = builder->AddRule(rule_name);
  SchemaCompiler compiler(builder, schema, std::string(rule_name), options, limits);
  StatusOr<int32_t> body = compiler.Visit(schema, "", 0);
  if (!body.ok()) return body.status().WithContext("json_schema");
  if (*body == kNone) return InvalidArgument("json_schema: the schema accepts no value");
  builder->SetAlternatives(rule, {{builder->Ref(*body)}});
  if (builder->rule_count() > limits.max_rules || builder->element_count() > limits.max_elements) {
    return ResourceExhausted("json_schema: the grammar is over the limits of " +
                             std::to_string(limits.max_rules) + " rules and " +
                             std::to_string(limits.max_elements) + " elements");
  }
  return rule;
}

StatusOr<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema,
                                      const JsonSchemaOptions& options,
                                      const GrammarLimits& limits) {
  GrammarBuilder builder;
  VLS_ASSIGN_OR_RETURN(const int32_t root,
                       AddJsonSchemaRule(&builder, schema, "root", options, limits));
  Grammar g = std::move(builder).Build(root);
  VLS_RETURN_IF_ERROR(ValidateGrammar(g, limits));
  return g;
}

StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                      const JsonSchemaOptions& options,
                                      const GrammarLimits& limits) {
  if (schema_json.size() > limits.max_source_bytes) {
    return ResourceExhausted("json_schema: the schema text of " +
                             std::to_string(schema_json.size()) + " bytes is over the limit of " +
                             std::to_string(limits.max_source_bytes));
  }
  Json schema;
  JsonParseOptions parse;
  parse.max_depth = 2 * limits.max_nesting + 4;
  parse.code = StatusCode::kInvalidArgument;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson("json_schema", schema_json, &schema, parse));
  return JsonSchemaToGrammar(schema, options, limits);
}

Grammar AnyJsonObjectGrammar() {
  GrammarBuilder builder;
  const Json schema = {{"type", "object"}};
  const int32_t root = builder.AddRule("root");
  SchemaCompiler compiler(&builder, schema, "root", JsonSchemaOptions{}, GrammarLimits{});
  builder.SetAlternatives(root, {{builder.Ref(compiler.AnyObject())}});
  return std::move(builder).Build(root);
}

}  // namespace vls::grammar
