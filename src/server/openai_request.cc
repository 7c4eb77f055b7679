#include "server/openai_request.h"

#include <cctype>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "io/untrusted_json.h"
#include "runtime/chat_json.h"
#include "runtime/media_source.h"
#include "runtime/request.h"
#include "runtime/structured_output_json.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;

Status Bad(const std::string& field, const std::string& why) {
  return InvalidArgument("\"" + field + "\" " + why).WithParam(field);
}

// The fields OpenAI clients send that change nothing here (identification, caching and routing
// hints, OpenAI's own reasoning and verbosity knobs).
constexpr const char* kIgnored[] = {"user",
                                    "metadata",
                                    "store",
                                    "parallel_tool_calls",
                                    "service_tier",
                                    "prompt_cache_key",
                                    "safety_identifier",
                                    "reasoning_effort",
                                    "verbosity"};

// ChatRequestFromJson's error without its "chat request: " prefix, which reads oddly in an API
// answer (its param is kept).
Status Unprefixed(const Status& s) {
  std::string m = s.message();
  const std::string prefix = "chat request: ";
  if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
  return Status(s.code(), m).WithParam(s.param());
}

Status ReadBoolField(const Json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return Status::Ok();
  return ReadJsonBool(*it, std::string("\"") + key + "\"", out).WithParam(key);
}

// The fields every endpoint reads itself: model, stream, stream_options, n.
Status ReadCommon(Json* body, std::string* model, bool* stream, bool* include_usage) {
  if (auto it = body->find("model"); it != body->end()) {
    if (!it->is_null()) {
      VLS_RETURN_IF_ERROR(ReadJsonString(*it, "\"model\"", model).WithParam("model"));
    }
    body->erase(it);
  }
  VLS_RETURN_IF_ERROR(ReadBoolField(*body, "stream", stream));
  body->erase("stream");
  if (auto it = body->find("stream_options"); it != body->end()) {
    if (!it->is_null()) {
      if (!it->is_object()) return Bad("stream_options", "must be an object");
      for (const auto& [k, v] : it->items()) {
        if (k == "include_usage") {
          if (!v.is_null()) {
            VLS_RETURN_IF_ERROR(ReadJsonBool(v, "\"stream_options.include_usage\"", include_usage)
                                    .WithParam("stream_options.include_usage"));
          }
        } else if (k != "continuous_usage_stats" && k != "include_obfuscation") {
          return Bad("stream_options." + k, "is not a known field");
        }
      }
      if (!*stream && *include_usage) {
        return Bad("stream_options", "is only allowed when \"stream\" is true");
      }
    }
    body->erase(it);
  }
  if (auto it = body->find("n"); it != body->end()) {
    if (!it->is_null()) {
      int64_t n = 0;
      VLS_RETURN_IF_ERROR(
          ReadJsonInt(*it, "\"n\"", 1, std::numeric_limits<int32_t>::max(), &n).WithParam("n"));
      if (n != 1) return Bad("n", "must be 1: one choice per request is supported");
    }
    body->erase(it);
  }
  for (const char* k : kIgnored) body->erase(k);
  return Status::Ok();
}

// {"type": "function", "function": {"name": string, "description"?: string, "parameters"?:
// object, "strict"?: bool}}.
Status CheckTools(const Json& tools, const RequestLimits& limits) {
  if (!tools.is_array()) return Bad("tools", "must be a list of tools");
  if (tools.size() > limits.max_tools) {
    return Bad("tools", "has " + std::to_string(tools.size()) + " tools; at most " +
                            std::to_string(limits.max_tools) + " are allowed");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) return Bad(where, "must be an object");
    auto type = t.find("type");
    if (type == t.end() || !type->is_string() || *type != "function") {
      return Bad(where + ".type", "must be \"function\"");
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return Bad(where + ".function", "must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return Bad(where + ".function.name", "must be a non-empty string");
    }
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object()) {
      return Bad(where + ".function.parameters", "must be a JSON Schema object");
    }
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string()) {
      return Bad(where + ".function.description", "must be a string");
    }
  }
  return Status::Ok();
}

Status ReadToolChoice(const Json& v, const Json& tools, ChatCompletionRequest* r) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "none") {
      r->tool_choice = ToolChoice::kNone;
    } else if (s == "auto") {
      r->tool_choice = ToolChoice::kAuto;
    } else if (s == "required") {
      r->tool_choice = ToolChoice::kRequired;
    } else {
      return Bad("tool_choice", "must be \"none\", \"auto\", \"required\" or a named function");
    }
  } else if (v.is_object()) {
    auto fn = v.find("function");
    auto type = v.find("type");
    if (type == v.end() || *type != "function" || fn == v.end() || !fn->is_object() ||
        !fn->contains("name") || !(*fn)["name"].is_string()) {
      return Bad("tool_choice", "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    r->tool_choice = ToolChoice::kNamed;
    r->tool_name = (*fn)["name"].get<std::string>();
  } else {
    return Bad("tool_choice", "must be a string or an object");
  }
  if (r->tool_choice != ToolChoice::kNone && tools.is_null()) {
    return Bad("tool_choice", "needs \"tools\"");
  }
  if (r->tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const Json& t : tools) found = found || t["function"]["name"] == r->tool_name;
    if (!found) return Bad("tool_choice", "names \"" + r->tool_name + "\", which is not in tools");
  }
  return Status::Ok();
}

// Moves `from` to `to` (max_completion_tokens -> max_tokens); both given is refused when they
// differ.
Status Rename(Json* body, const char* from, const char* to) {
  auto it = body->find(from);
  if (it == body->end()) return Status::Ok();
  Json v = *it;
  body->erase(it);
  if (v.is_null()) return Status::Ok();
  auto other = body->find(to);
  if (other != body->end() && !other->is_null() && *other != v) {
    return Bad(from, std::string("and \"") + to + "\" disagree");
  }
  (*body)[to] = std::move(v);
  return Status::Ok();
}

Status CheckStopCount(const Json& body, const RequestLimits& limits) {
  auto it = body.find("stop");
  if (it != body.end() && it->is_array() && it->size() > limits.max_stop) {
    return Bad("stop", "has " + std::to_string(it->size()) + " strings; at most " +
                           std::to_string(limits.max_stop) + " are allowed");
  }
  return Status::Ok();
}

// A video's sampling options as the server bounds them (ImageEncoderOptions' max_video_fps and
// max_video_frames): "fps" a number in (0, max_video_fps], "max_frames" and "num_frames"
// integers in [1, max_video_frames]; "fps" and "num_frames" together are refused (transformers'
// processor refuses them too: each decides the frame count). `where` prefixes each field's
// name ("messages[0].content[1]." or "mm_processor_kwargs."); other keys are left to the
// caller.
Status ReadVideoOptions(const Json& obj, const std::string& where, const RequestLimits& limits,
                        VideoSamplingOptions* out) {
  if (auto it = obj.find("fps"); it != obj.end() && !it->is_null()) {
    const std::string field = where + "fps";
    double fps = 0;
    VLS_RETURN_IF_ERROR(
        ReadJsonNumber(*it, "\"" + field + "\"", 0.0, limits.max_video_fps, &fps).WithParam(field));
    if (!(fps > 0)) return Bad(field, "must be more than 0");
    out->fps = fps;
  }
  for (const char* key : {"max_frames", "num_frames"}) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) continue;
    const std::string field = where + key;
    int64_t n = 0;
    VLS_RETURN_IF_ERROR(
        ReadJsonInt(*it, "\"" + field + "\"", 1, limits.max_video_frames, &n).WithParam(field));
    (std::string_view(key) == "max_frames" ? out->max_frames : out->num_frames) =
        static_cast<int>(n);
  }
  if (out->fps && out->num_frames) {
    return Bad(where + "num_frames", "and \"" + where +
                                         "fps\" cannot both be given: each decides how many "
                                         "frames are sampled");
  }
  return Status::Ok();
}

// A video part: {"type": "video_url", "video_url": {"url": SRC} | SRC} (vLLM's convention) or
// {"type": "video", "video" | "url" | "path": SRC}, with optional "fps", "max_frames" and
// "num_frames" (media_source.h reads SRC; the pipeline decodes it).
Status CheckVideoPart(const Json& part, const std::string& where, const RequestLimits& limits) {
  const std::string& type = part["type"].get_ref<const std::string&>();
  if (type == "video_url") {
    auto v = part.find("video_url");
    const bool ok =
        v != part.end() &&
        (v->is_string() || (v->is_object() && v->contains("url") && (*v)["url"].is_string()));
    if (!ok) {
      return Bad(where + ".video_url",
                 "must be {\"url\": \"data:video/...;base64,...\"} or a string (the clip)");
    }
  } else {
    bool found = false;
    for (const char* key : {"video", "url", "path"}) {
      auto v = part.find(key);
      if (v == part.end()) continue;
      if (!v->is_string()) return Bad(where + "." + key, "must be a string (the clip)");
      found = true;
    }
    if (!found) return Bad(where + ".video", "is required: the clip as a data: URL or a path");
  }
  VideoSamplingOptions unused;
  return ReadVideoOptions(part, where + ".", limits, &unused);
}

// vLLM's request-level "mm_processor_kwargs": {"fps"?, "max_frames"?, "num_frames"?}, the
// sampling of every video part that does not set its own.
Status ReadMmProcessorKwargs(const Json& v, const RequestLimits& limits,
                             VideoSamplingOptions* out) {
  if (!v.is_object()) return Bad("mm_processor_kwargs", "must be an object");
  for (const auto& [k, unused] : v.items()) {
    if (k != "fps" && k != "max_frames" && k != "num_frames") {
      return Bad("mm_processor_kwargs." + k,
                 "is not a known field (fps, max_frames and num_frames are)");
    }
  }
  return ReadVideoOptions(v, "mm_processor_kwargs.", limits, out);
}

// OpenAI's message shape, before the pipeline's own checks: a known role (a chat template drops
// a role it does not know, so a typo would silently lose the message) and content parts that
// say their "type" (the pipeline also recognises a part by its keys, as the Qwen-VL templates
// do; the API requires the type).
Status CheckMessage(const Json& m, size_t i, const RequestLimits& limits) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return Bad(where, "must be an object");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) {
    return Bad(where + ".role",
               "must be one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"");
  }
  const std::string& r = role->get_ref<const std::string&>();
  if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
    return Bad(where + ".role", JsonSnippet(*role) +
                                    " is not a known role (system, developer, user, assistant "
                                    "or tool)");
  }
  auto content = m.find("content");
  if (content == m.end() || !content->is_array()) return Status::Ok();
  for (size_t k = 0; k < content->size(); ++k) {
    const Json& part = (*content)[k];
    const std::string pwhere = where + ".content[" + std::to_string(k) + "]";
    if (!part.is_object()) return Bad(pwhere, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return Bad(pwhere + ".type", "is required: a string such as \"text\" or \"image_url\"");
    }
    if (*type == "video_url" || *type == "video") {
      VLS_RETURN_IF_ERROR(CheckVideoPart(part, pwhere, limits));
    }
  }
  return Status::Ok();
}

Status CheckMessages(const Json& body, const RequestLimits& limits) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return Bad("messages", "must be a non-empty list of messages");
  }
  if (it->size() > limits.max_messages) {
    return Bad("messages", "has " + std::to_string(it->size()) + " messages; at most " +
                               std::to_string(limits.max_messages) + " are allowed");
  }
  for (size_t i = 0; i < it->size(); ++i) VLS_RETURN_IF_ERROR(CheckMessage((*it)[i], i, limits));
  VLS_ASSIGN_OR_RETURN(std::vector<MediaItem> media, CollectMedia(*it));
  if (media.size() > limits.max_images) {
    return Bad("messages", "holds " + std::to_string(media.size()) + " images or videos; at most " +
                               std::to_string(limits.max_images) + " are allowed per request");
  }
  return Status::Ok();
}

// ValidateSamplingParams with the field quoted ("sampling.top_p: why" -> "\"top_p\" why"), and
// OpenAI's range for the penalties.
Status CheckSampling(const SamplingParams& p) {
  for (const auto& [name, v] :
       {std::pair<const char*, float>{"presence_penalty", p.presence_penalty},
        {"frequency_penalty", p.frequency_penalty}}) {
    if (!(v >= -2.0f && v <= 2.0f)) return Bad(name, "must be in [-2, 2]");
  }
  Status s = ValidateSamplingParams(p);
  if (s.ok()) return s;
  std::string m = s.message();
  const std::string prefix = "sampling.";
  const size_t colon = m.find(": ");
  if (m.rfind(prefix, 0) == 0 && colon != std::string::npos) {
    return Bad(m.substr(prefix.size(), colon - prefix.size()), m.substr(colon + 2));
  }
  return s;
}

// The runtime's rule (structured_output_json.h), checked as the request is read.
Status CheckStopWithStructure(const ChatRequest& r) {
  return CheckStopWithReplyFormat(r.structured, r.stop);
}

// A JSON list of token ids.
StatusOr<std::vector<int32_t>> TokenList(const Json& v) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const Json& x : v) {
    int64_t id = 0;
    VLS_RETURN_IF_ERROR(
        ReadJsonInt(x, "each token of \"prompt\"", 0, std::numeric_limits<int32_t>::max(), &id)
            .WithParam("prompt"));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

OpenAiError ErrorFromStatus(const Status& status) {
  OpenAiError e;
  e.message = status.message();
  switch (status.code()) {
    case StatusCode::kOutOfRange:
      // The pipeline's refusal of a prompt that does not fit (the context or the chat
      // template's budget) names the messages or the prompt: OpenAI's code for it.
      e.status = 400;
      if (status.param() == "messages" || status.param() == "prompt") {
        e.code = "context_length_exceeded";
      }
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kDataLoss:
    case StatusCode::kIoError: e.status = 400; break;
    case StatusCode::kUnimplemented:
      e.status = 400;
      e.code = "unsupported";
      break;
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      break;
    case StatusCode::kFailedPrecondition:
      e.status = 503;
      e.type = "server_error";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      e.message = std::string(StatusCodeName(status.code())) + ": " + status.message();
      break;
  }
  if (e.status == 400) e.param = status.param();  // data, never parsed from the text
  return e;
}

StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(const Json& body_in,
                                                           const SamplingParams& defaults,
                                                           const RequestLimits& limits) {
  if (!body_in.is_object()) return InvalidArgument("the request body must be a JSON object");
  ChatCompletionRequest r;
  Json body = body_in;
  VLS_RETURN_IF_ERROR(ReadCommon(&body, &r.model, &r.stream, &r.include_usage));
  VLS_RETURN_IF_ERROR(CheckMessages(body, limits));
  VLS_RETURN_IF_ERROR(CheckStopCount(body, limits));
  VLS_RETURN_IF_ERROR(Rename(&body, "max_completion_tokens", "max_tokens"));
  // OpenAI clients send "content": null on an assistant message that only calls tools; chat
  // templates iterate over a non-string content, so it becomes "" (as vLLM does). OpenAI's
  // "developer" role is the system prompt by its newer name; chat templates know only "system"
  // (Qwen's drops a role it does not know).
  for (Json& m : body["messages"]) {
    if (auto c = m.find("content"); c != m.end() && c->is_null()) *c = "";
    if (auto role = m.find("role"); role != m.end() && *role == "developer") *role = "system";
    if (auto c = m.find("content"); c != m.end() && c->is_array()) {
      for (Json& part : *c) VideoUrlAsVideoPart(&part);
    }
  }

  // logprobs: a boolean here (the pipeline's integer is the number of top tokens).
  int64_t top = 0;
  bool top_set = false;
  if (auto it = body.find("top_logprobs"); it != body.end()) {
    if (!it->is_null()) {
      VLS_RETURN_IF_ERROR(
          ReadJsonInt(*it, "\"top_logprobs\"", 0, kMaxTopLogprobs, &top).WithParam("top_logprobs"));
      top_set = true;
    }
    body.erase(it);
  }
  VLS_RETURN_IF_ERROR(ReadBoolField(body, "logprobs", &r.logprobs));
  body.erase("logprobs");
  if (top_set && !r.logprobs) return Bad("top_logprobs", "needs \"logprobs\": true");
  r.top_logprobs = static_cast<int>(top);

  // tools and tool_choice are checked here (the server's bounds, and what the reply's tool calls
  // are parsed for) and stay in the body: ChatRequestFromJson reads them again, with
  // response_format, json_schema, grammar and regex, into chat.structured
  // (StructuredOutputFromJson, the one reader the C ABI shares).
  Json tools;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    VLS_RETURN_IF_ERROR(CheckTools(*it, limits));
    if (!it->empty()) tools = *it;
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    VLS_RETURN_IF_ERROR(ReadToolChoice(*it, tools, &r));
  }
  VideoSamplingOptions video;
  if (auto it = body.find("mm_processor_kwargs"); it != body.end()) {
    if (!it->is_null()) VLS_RETURN_IF_ERROR(ReadMmProcessorKwargs(*it, limits, &video));
    body.erase(it);
  }
  auto chat = ChatRequestFromJson(body, defaults);
  if (!chat.ok()) return Unprefixed(chat.status());
  r.chat = std::move(*chat);
  r.chat.video = video;
  VLS_RETURN_IF_ERROR(CheckSampling(r.chat.sampling));
  r.chat.tools = r.tool_choice == ToolChoice::kNone ? Json() : tools;
  r.chat.logprobs = r.logprobs ? r.top_logprobs : -1;
  VLS_RETURN_IF_ERROR(CheckStopWithStructure(r.chat));
  return r;
}

StatusOr<CompletionRequest> ParseCompletionRequest(const Json& body_in,
                                                   const SamplingParams& defaults,
                                                   const RequestLimits& limits) {
  if (!body_in.is_object()) return InvalidArgument("the request body must be a JSON object");
  CompletionRequest r;
  Json body = body_in;
  VLS_RETURN_IF_ERROR(ReadCommon(&body, &r.model, &r.stream, &r.include_usage));
  VLS_RETURN_IF_ERROR(CheckStopCount(body, limits));
  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) return Bad("prompt", "is required");
  Json p = *prompt;
  body.erase(prompt);
  // A list of one prompt is the same as the prompt (the API allows batches; we take one).
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = Json(p[0]);
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    if (r.prompt->empty()) return Bad("prompt", "is empty");
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    VLS_ASSIGN_OR_RETURN(r.tokens, TokenList(p));
  } else {
    return Bad("prompt",
               "must be a non-empty string or list of token ids (one prompt per request)");
  }
  if (auto it = body.find("echo"); it != body.end()) {
    bool echo = false;
    if (!it->is_null()) VLS_RETURN_IF_ERROR(ReadJsonBool(*it, "\"echo\"", &echo).WithParam("echo"));
    if (echo) {
      return Status(StatusCode::kUnimplemented, "\"echo\": true is not supported")
          .WithParam("echo");
    }
    body.erase(it);
  }
  if (auto it = body.find("best_of"); it != body.end()) {
    int64_t b = 1;
    if (!it->is_null()) {
      VLS_RETURN_IF_ERROR(ReadJsonInt(*it, "\"best_of\"", 1, 1, &b).WithParam("best_of"));
    }
    body.erase(it);
  }
  if (auto it = body.find("suffix"); it != body.end()) {
    if (!it->is_null()) {
      return Status(StatusCode::kUnimplemented, "\"suffix\" is not supported").WithParam("suffix");
    }
    body.erase(it);
  }
  if (auto it = body.find("logprobs"); it != body.end()) {
    int64_t n = -1;
    if (!it->is_null()) {
      VLS_RETURN_IF_ERROR(ReadJsonInt(*it, "\"logprobs\"", 0, 5, &n).WithParam("logprobs"));
    }
    r.logprobs = static_cast<int>(n);
    body.erase(it);
  }
  for (const char* chat_only : {"messages", "tools", "tool_choice", "mm_processor_kwargs"}) {
    if (body.contains(chat_only)) return Bad(chat_only, "is for /v1/chat/completions");
  }
  // The pipeline's reader wants messages; a placeholder it accepts and the raw path ignores.
  body["messages"] = Json::array({Json::object()});
  auto params = ChatRequestFromJson(body, defaults);
  if (!params.ok()) return Unprefixed(params.status());
  r.params = std::move(*params);
  VLS_RETURN_IF_ERROR(CheckSampling(r.params.sampling));
  r.params.messages = Json::array();
  r.params.logprobs = r.logprobs;
  VLS_RETURN_IF_ERROR(CheckStopWithStructure(r.params));
  return r;
}

}  // namespace vls::server
