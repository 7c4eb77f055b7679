#include "tokenizer/chat_template.h"

#include <sys/stat.h>

#include "base/file.h"
#include "io/untrusted_json.h"

namespace vls::tok {
namespace {

bool Exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// "chat_template" of a tokenizer_config.json / chat_template.json, read with the shared
// untrusted-JSON parser and strict typed reads: a wrong type is an error naming the field.
StatusOr<std::string> FromConfigJson(const std::string& path) {
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json j;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(path, text, &j));
  if (!j.is_object()) return DataLoss(path + ": not a JSON object but " + JsonTypeName(j));
  const auto it = j.find("chat_template");
  if (it == j.end()) return NotFound(path + ": no \"chat_template\"");
  std::string source;
  if (it->is_array()) {
    // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& e = (*it)[i];
      const std::string what = "chat_template[" + std::to_string(i) + "]";
      if (!e.is_object()) {
        return DataLoss(path + ": " + what + " must be an object, not " + JsonTypeName(e));
      }
      const auto name = e.find("name");
      const auto tmpl = e.find("template");
      if (name == e.end() || tmpl == e.end()) {
        return DataLoss(path + ": " + what + " needs \"name\" and \"template\"");
      }
      std::string entry_name;
      Status st = ReadJsonString(*name, what + ".name", &entry_name);
      if (st.ok() && entry_name == "default")
        st = ReadJsonString(*tmpl, what + ".template", &source);
      if (!st.ok()) return Status(StatusCode::kDataLoss, path + ": " + st.message());
      if (entry_name == "default") return source;
    }
    return NotFound(path + ": \"chat_template\" list has no entry named \"default\"");
  }
  if (!it->is_string()) {
    return DataLoss(path + ": \"chat_template\" must be a string or a list, not " +
                    JsonTypeName(*it));
  }
  Status st = ReadJsonString(*it, "chat_template", &source);
  if (!st.ok()) return Status(StatusCode::kDataLoss, path + ": " + st.message());
  return source;
}

}  // namespace

StatusOr<std::string> LoadChatTemplateSource(const std::string& dir) {
  const std::string jinja = JoinPath(dir, "chat_template.jinja");
  if (Exists(jinja)) return ReadFileToString(jinja);
  const std::string json = JoinPath(dir, "chat_template.json");
  if (Exists(json)) return FromConfigJson(json);
  const std::string config = JoinPath(dir, "tokenizer_config.json");
  if (Exists(config)) return FromConfigJson(config);
  return NotFound(dir + ": no chat_template.jinja, chat_template.json or tokenizer_config.json");
}

StatusOr<std::string> LoadChatTemplateFile(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    return FromConfigJson(path);
  return ReadFileToString(path);
}

StatusOr<std::string> RenderChat(const jinja::Template& tmpl, const nlohmann::ordered_json& request,
                                 const jinja::RenderLimits& limits) {
  try {
    if (!request.is_object()) return InvalidArgument("chat request must be a JSON object");
    const auto messages = request.find("messages");
    if (messages == request.end() || !messages->is_array()) {
      return InvalidArgument("chat request needs \"messages\": [...]");
    }
    // Template variables from the request; each is held to kMaxValueDepth and
    // kMaxTemplateInputValues (Value::FromJson).
    auto variable = [&request](const char* key) -> StatusOr<jinja::Value> {
      const auto it = request.find(key);
      if (it == request.end()) return jinja::Value::None();
      return jinja::Value::FromJson(*it, std::string("chat request \"") + key + "\"");
    };
    jinja::ValueDict globals;
    VLS_ASSIGN_OR_RETURN(jinja::Value msgs, variable("messages"));
    globals.emplace_back("messages", std::move(msgs));
    VLS_ASSIGN_OR_RETURN(jinja::Value tools, variable("tools"));
    globals.emplace_back("tools", std::move(tools));
    VLS_ASSIGN_OR_RETURN(jinja::Value documents, variable("documents"));
    globals.emplace_back("documents", std::move(documents));
    bool add_generation_prompt = false;  // absent or null: Python's None, falsy
    if (const auto it = request.find("add_generation_prompt");
        it != request.end() && !it->is_null()) {
      VLS_RETURN_IF_ERROR(ReadJsonBool(*it, "add_generation_prompt", &add_generation_prompt));
    }
    globals.emplace_back("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
    for (const auto& [key, value] : request.items()) {
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt") {
        continue;
      }
      VLS_ASSIGN_OR_RETURN(jinja::Value v,
                           jinja::Value::FromJson(value, "chat request \"" + key + "\""));
      globals.emplace_back(key, std::move(v));
    }
    return tmpl.Render(globals, limits);
  } catch (const std::exception& e) {
    // Nothing above throws by design (typed reads are checked first); this keeps a bug or an
    // allocation failure from leaving the API as an exception.
    return Internal(std::string("rendering the chat template: ") + e.what());
  }
}

StatusOr<std::vector<int32_t>> ExpandVisualPads(std::span<const int32_t> ids, int32_t pad_id,
                                                std::span<const GridThw> grids, int merge_size) {
  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  std::vector<int32_t> out;
  out.reserve(ids.size());
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != pad_id) {
      out.push_back(id);
      continue;
    }
    if (next >= grids.size()) {
      return InvalidArgument("more placeholder tokens than grids (" + std::to_string(grids.size()) +
                             ")");
    }
    const GridThw& g = grids[next];
    VLS_RETURN_IF_ERROR(ValidateGridThw(g, merge_size, "grid " + std::to_string(next)));
    const int64_t n = MergedTokens(g, merge_size);
    if (n + static_cast<int64_t>(out.size()) > kMaxTokens) {
      return InvalidArgument("grid " + std::to_string(next) + " " + GridToString(g) +
                             " expands the sequence past " + std::to_string(kMaxTokens) +
                             " tokens");
    }
    out.insert(out.end(), static_cast<size_t>(n), pad_id);
    ++next;
  }
  if (next != grids.size()) {
    return InvalidArgument(std::to_string(grids.size()) + " grids but " + std::to_string(next) +
                           " placeholder tokens");
  }
  return out;
}

}  // namespace vls::tok
