#include "runtime/structured_output_json.h"

#include <string>
#include <utility>

#include "io/untrusted_json.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

Status Bad(const std::string& field, const std::string& why) {
  return InvalidArgument("\"" + field + "\" " + why).WithParam(field);
}

// The field `key` when present and not null (null is the same as absent), else nullptr.
const Json* Field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A JSON schema given as a field: an object (or a boolean schema), kept as its JSON text.
Status ReadSchema(const Json& v, const std::string& field, StructuredOutput* out) {
  if (!v.is_object() && !v.is_boolean()) return Bad(field, "must be a JSON Schema object");
  out->kind = StructuredOutput::Kind::kJsonSchema;
  out->source = v.dump();
  return Status::Ok();
}

Status ReadResponseFormat(const Json& v, StructuredOutput* out) {
  if (!v.is_object()) return Bad("response_format", "must be an object with a \"type\"");
  const Json* type = Field(v, "type");
  if (type == nullptr || !type->is_string()) {
    return Bad("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") {
    for (const auto& [key, value] : v.items()) {
      if (key != "type") return Bad("response_format." + key, "is not a field of type \"text\"");
    }
    return Status::Ok();
  }
  if (t == "json_object") {
    for (const auto& [key, value] : v.items()) {
      if (key != "type" && key != "schema") {
        return Bad("response_format." + key, "is not a field of type \"json_object\"");
      }
    }
    if (const Json* schema = Field(v, "schema")) {
      return ReadSchema(*schema, "response_format.schema", out);
    }
    out->kind = StructuredOutput::Kind::kJsonObject;
    return Status::Ok();
  }
  if (t != "json_schema") {
    return Bad("response_format.type",
               "is " + JsonSnippet(*type) + ", not \"text\", \"json_object\" or \"json_schema\"");
  }
  for (const auto& [key, value] : v.items()) {
    if (key != "type" && key != "json_schema") {
      return Bad("response_format." + key, "is not a field of type \"json_schema\"");
    }
  }
  const Json* js = Field(v, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return Bad("response_format.json_schema", "must be an object {\"name\", \"schema\"}");
  }
  for (const auto& [key, value] : js->items()) {
    if (key != "name" && key != "schema" && key != "strict" && key != "description") {
      return Bad("response_format.json_schema." + key, "is not a known field");
    }
  }
  if (const Json* name = Field(*js, "name"); name != nullptr && !name->is_string()) {
    return Bad("response_format.json_schema.name", "must be a string");
  }
  if (const Json* d = Field(*js, "description"); d != nullptr && !d->is_string()) {
    return Bad("response_format.json_schema.description", "must be a string");
  }
  bool strict = false;
  if (const Json* s = Field(*js, "strict")) {
    VLS_RETURN_IF_ERROR(ReadJsonBool(*s, "\"response_format.json_schema.strict\"", &strict)
                            .WithParam("response_format.json_schema.strict"));
  }
  const Json* schema = Field(*js, "schema");
  if (schema == nullptr) {
    return Bad("response_format.json_schema.schema", "is required (the JSON Schema)");
  }
  VLS_RETURN_IF_ERROR(ReadSchema(*schema, "response_format.json_schema.schema", out));
  out->strict = strict;
  return Status::Ok();
}

// The function names of `tools` and whether any is strict, after checking each tool's shape.
Status ReadTools(const Json& tools, std::vector<std::string>* names, bool* any_strict) {
  if (!tools.is_array()) return Bad("tools", "must be a list of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) return Bad(where, "must be an object");
    const Json* type = Field(t, "type");
    if (type == nullptr || !type->is_string() || *type != "function") {
      return Bad(where + ".type", "must be \"function\"");
    }
    const Json* fn = Field(t, "function");
    if (fn == nullptr || !fn->is_object()) return Bad(where + ".function", "must be an object");
    const Json* name = Field(*fn, "name");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return Bad(where + ".function.name", "must be a non-empty string");
    }
    if (const Json* p = Field(*fn, "parameters"); p != nullptr && !p->is_object()) {
      return Bad(where + ".function.parameters", "must be a JSON Schema object");
    }
    if (const Json* s = Field(*fn, "strict")) {
      bool strict = false;
      VLS_RETURN_IF_ERROR(ReadJsonBool(*s, "\"" + where + ".function.strict\"", &strict)
                              .WithParam(where + ".function.strict"));
      *any_strict = *any_strict || strict;
    }
    names->push_back(name->get<std::string>());
  }
  return Status::Ok();
}

Status ReadToolChoice(const Json* choice, const Json* tools, StructuredOutput* out) {
  std::vector<std::string> names;
  bool any_strict = false;
  if (tools != nullptr) VLS_RETURN_IF_ERROR(ReadTools(*tools, &names, &any_strict));
  const bool have_tools = !names.empty();
  out->tools = StructuredOutput::Tools::kFree;
  if (choice == nullptr) {
    if (have_tools && any_strict) out->tools = StructuredOutput::Tools::kStrict;
    return Status::Ok();
  }
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "none") return Status::Ok();
    if (s != "auto" && s != "required") {
      return Bad("tool_choice", "must be \"none\", \"auto\", \"required\" or a named function");
    }
    if (!have_tools) return Bad("tool_choice", "needs \"tools\"");
    if (s == "required") {
      out->tools = StructuredOutput::Tools::kRequired;
    } else if (any_strict) {
      out->tools = StructuredOutput::Tools::kStrict;
    }
    return Status::Ok();
  }
  const Json* fn = choice->is_object() ? Field(*choice, "function") : nullptr;
  const Json* type = choice->is_object() ? Field(*choice, "type") : nullptr;
  const Json* name = fn != nullptr && fn->is_object() ? Field(*fn, "name") : nullptr;
  if (type == nullptr || *type != "function" || name == nullptr || !name->is_string()) {
    return Bad("tool_choice",
               "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
               "\"function\": {\"name\": ...}}");
  }
  if (!have_tools) return Bad("tool_choice", "needs \"tools\"");
  const std::string& n = name->get_ref<const std::string&>();
  bool found = false;
  for (const std::string& x : names) found = found || x == n;
  if (!found) return Bad("tool_choice", "names \"" + n + "\", which is not in tools");
  out->tools = StructuredOutput::Tools::kNamed;
  out->tool_name = n;
  return Status::Ok();
}

}  // namespace

Status StructuredOutputFromJson(const Json& request, StructuredOutput* out) {
  if (!request.is_object()) return InvalidArgument("the request must be a JSON object");
  StructuredOutput so;
  // The constraint fields, at most one of them.
  const char* given = nullptr;
  auto one = [&given](const char* field) -> Status {
    if (given != nullptr) {
      return Bad(field, std::string("cannot be combined with \"") + given +
                            "\": give at most one of response_format, json_schema, grammar "
                            "and regex");
    }
    given = field;
    return Status::Ok();
  };
  if (const Json* rf = Field(request, "response_format")) {
    VLS_RETURN_IF_ERROR(ReadResponseFormat(*rf, &so));
    if (so.kind != StructuredOutput::Kind::kNone) VLS_RETURN_IF_ERROR(one("response_format"));
  }
  if (const Json* js = Field(request, "json_schema")) {
    VLS_RETURN_IF_ERROR(one("json_schema"));
    if (!js->is_object()) return Bad("json_schema", "must be a JSON Schema object");
    VLS_RETURN_IF_ERROR(ReadSchema(*js, "json_schema", &so));
    so.strict = false;
  }
  if (const Json* g = Field(request, "grammar")) {
    VLS_RETURN_IF_ERROR(one("grammar"));
    if (!g->is_string()) return Bad("grammar", "must be a string (a GBNF grammar)");
    so.kind = StructuredOutput::Kind::kGbnf;
    so.source = g->get<std::string>();
  }
  if (const Json* re = Field(request, "regex")) {
    VLS_RETURN_IF_ERROR(one("regex"));
    if (!re->is_string()) return Bad("regex", "must be a string (a regular expression)");
    so.kind = StructuredOutput::Kind::kRegex;
    so.source = re->get<std::string>();
  }
  VLS_RETURN_IF_ERROR(ReadToolChoice(Field(request, "tool_choice"), Field(request, "tools"), &so));
  if (given != nullptr && (so.tools == StructuredOutput::Tools::kRequired ||
                           so.tools == StructuredOutput::Tools::kNamed)) {
    return Bad(given, std::string("cannot be combined with tool_choice ") +
                          (so.tools == StructuredOutput::Tools::kNamed ? "naming a function"
                                                                       : "\"required\"") +
                          ": the reply is tool calls only");
  }
  if (given != nullptr) so.field = given;
  *out = std::move(so);
  return Status::Ok();
}

Status CheckStopWithReplyFormat(const StructuredOutput& so, const std::vector<std::string>& stop) {
  if (so.kind == StructuredOutput::Kind::kNone || stop.empty()) return Status::Ok();
  return Bad("stop",
             "cannot be combined with a reply format (response_format json_object or "
             "json_schema, json_schema, grammar, regex): a stop string would cut the reply "
             "before it is complete; the grammar ends the reply by itself");
}

}  // namespace vls
