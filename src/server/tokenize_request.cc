#include "server/tokenize_request.h"

#include <utility>

#include "runtime/chat_json.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;

Status UnknownField(const std::string& k) {
  return InvalidArgument("\"" + k.substr(0, 200) + "\" is not a known field").WithParam(k);
}

}  // namespace

StatusOr<TokenizeRequest> ParseTokenizeRequest(const Json& body, const SamplingParams& defaults) {
  if (!body.is_object()) return InvalidArgument("the request body must be a JSON object");
  for (const auto& [k, v] : body.items()) {
    if (k != "content" && k != "prompt" && k != "messages" && k != "add_special" &&
        k != "add_generation_prompt" && k != "tools" && k != "model") {
      return UnknownField(k);
    }
  }
  const bool has_text = body.contains("content") || body.contains("prompt");
  if (has_text == body.contains("messages")) {
    return InvalidArgument("give either \"content\" (or \"prompt\") or \"messages\"")
        .WithParam("content");
  }
  TokenizeRequest r;
  if (has_text) {
    const char* name = body.contains("content") ? "content" : "prompt";
    const Json& t = body[name];
    if (!t.is_string()) {
      return InvalidArgument("\"" + std::string(name) + "\" must be a string").WithParam(name);
    }
    r.text = t.get<std::string>();
    return r;
  }
  Json chat_body{{"messages", body["messages"]}};
  for (const char* k : {"add_generation_prompt", "tools"}) {
    if (body.contains(k)) chat_body[k] = body[k];
  }
  VLS_ASSIGN_OR_RETURN(ChatRequest chat, ChatRequestFromJson(chat_body, defaults));
  r.chat = std::move(chat);
  return r;
}

StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const Json& body, int64_t id_limit) {
  if (!body.is_object()) return InvalidArgument("the request body must be a JSON object");
  for (const auto& [k, v] : body.items()) {
    if (k != "tokens" && k != "model") return UnknownField(k);
  }
  auto t = body.find("tokens");
  if (t == body.end() || !t->is_array()) {
    return InvalidArgument("\"tokens\" must be a list of token ids").WithParam("tokens");
  }
  std::vector<int32_t> ids;
  ids.reserve(t->size());
  for (const Json& x : *t) {
    int64_t id = 0;
    VLS_RETURN_IF_ERROR(
        ReadJsonInt(x, "each of \"tokens\"", 0, id_limit - 1, &id).WithParam("tokens"));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace vls::server
