#include "tokenizer/chat_template.h"

#include <sys/stat.h>

#include "base/file.h"

namespace vls::tok {
namespace {

bool Exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

StatusOr<std::string> FromConfigJson(const std::string& path) {
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(path + ": not a JSON object");
  if (!j.contains("chat_template")) return NotFound(path + ": no \"chat_template\"");
  const auto& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& e : t) {
      if (e.is_object() && e.value("name", std::string()) == "default" && e.contains("template") &&
          e["template"].is_string()) {
        return e["template"].get<std::string>();
      }
    }
    return NotFound(path + ": \"chat_template\" list has no entry named \"default\"");
  }
  return DataLoss(path + ": \"chat_template\" must be a string or a list");
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

StatusOr<std::string> RenderChat(const jinja::Template& tmpl,
                                 const nlohmann::ordered_json& request) {
  if (!request.is_object()) return InvalidArgument("chat request must be a JSON object");
  if (!request.contains("messages") || !request["messages"].is_array()) {
    return InvalidArgument("chat request needs \"messages\": [...]");
  }
  jinja::ValueDict globals;
  globals.emplace_back("messages", jinja::Value::FromJson(request["messages"]));
  globals.emplace_back("tools", request.contains("tools") ? jinja::Value::FromJson(request["tools"])
                                                          : jinja::Value::None());
  globals.emplace_back("documents", request.contains("documents")
                                        ? jinja::Value::FromJson(request["documents"])
                                        : jinja::Value::None());
  globals.emplace_back("add_generation_prompt",
                       jinja::Value::Bool(request.value("add_generation_prompt", false)));
  for (const auto& [key, value] : request.items()) {
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      continue;
    }
    globals.emplace_back(key, jinja::Value::FromJson(value));
  }
  return tmpl.Render(globals);
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
