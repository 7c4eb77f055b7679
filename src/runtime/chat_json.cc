#include "runtime/chat_json.h"

#include <cmath>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "runtime/structured_output_json.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

Status Bad(const std::string& key, const std::string& why) {
  return InvalidArgument("chat request: \"" + key + "\" " + why).WithParam(key);
}

// The field `key` when present and not null (null is the same as absent), else nullptr.
const Json* Field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A reader's error as the request's: "chat request: \"key\" must be ..., not ...", about the
// field `param`.
Status Named(const Status& s, const std::string& param) {
  if (s.ok()) return s;
  return InvalidArgument("chat request: " + s.message()).WithParam(param);
}

std::string Quoted(std::string_view key) { return "\"" + std::string(key) + "\""; }

// Reads an optional field; null or absent leaves *out as is.
Status ReadFloat(const Json& j, const char* key, float* out) {
  const Json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  double d = 0;
  VLS_RETURN_IF_ERROR(Named(ReadJsonNumber(*v, Quoted(key), -std::numeric_limits<float>::max(),
                                           std::numeric_limits<float>::max(), &d),
                            key));
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status ReadInt(const Json& j, const char* key, int64_t lo, int64_t hi, int64_t* out, bool* set) {
  const Json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  VLS_RETURN_IF_ERROR(Named(ReadJsonInt(*v, Quoted(key), lo, hi, out), key));
  if (set != nullptr) *set = true;
  return Status::Ok();
}

Status ReadBool(const Json& j, const char* key, bool* out, bool* set) {
  const Json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  VLS_RETURN_IF_ERROR(Named(ReadJsonBool(*v, Quoted(key), out), key));
  if (set != nullptr) *set = true;
  return Status::Ok();
}

// A logit_bias key: a token id in [0, 2^31) written in decimal, no sign, no leading zero (so two
// keys never name one token).
bool ParseTokenIdKey(const std::string& key, int32_t* id) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return false;
  int64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > std::numeric_limits<int32_t>::max()) return false;
  *id = static_cast<int32_t>(v);
  return true;
}

// SAX handler that builds an ordered_json by appending: every key goes to the end of its object
// with no search (the rules pass already refused repeated keys), so the build is linear.
class OrderedBuilder {
 public:
  explicit OrderedBuilder(Json* root) : root_(root) {}

  bool null() { return Add(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return Add(Json(v)) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return Add(Json(v)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return Add(Json(v)) != nullptr; }
  bool number_float(Json::number_float_t v, const Json::string_t& /*text*/) {
    return Add(Json(v)) != nullptr;
  }
  bool string(Json::string_t& v) { return Add(Json(std::move(v))) != nullptr; }
  bool binary(Json::binary_t& v) { return Add(Json::binary(std::move(v))) != nullptr; }
  bool start_object(size_t /*elements*/) {
    open_.push_back(Add(Json::object()));
    return true;
  }
  bool key(Json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    open_.pop_back();
    return true;
  }
  bool start_array(size_t /*elements*/) {
    open_.push_back(Add(Json::array()));
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  bool parse_error(size_t /*position*/, const std::string& /*last_token*/,
                   const Json::exception& /*e*/) {
    return false;
  }

 private:
  // Places `v` in the innermost open container (or as the root) and returns where it now is.
  // Pointers to open containers stay valid: only the innermost one grows.
  Json* Add(Json v) {
    if (open_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Json* top = open_.back();
    if (top->is_array()) {
      auto& items = top->get_ref<Json::array_t&>();
      items.push_back(std::move(v));
      return &items.back();
    }
    auto& items = static_cast<Json::object_t::Container&>(top->get_ref<Json::object_t&>());
    items.emplace_back(std::move(key_), std::move(v));
    return &items.back().second;
  }

  Json* root_;
  std::vector<Json*> open_;
  std::string key_;
};

constexpr const char* kKnown[] = {"messages",
                                  "tools",
                                  "add_generation_prompt",
                                  "enable_thinking",
                                  "chat_template_kwargs",
                                  "max_tokens",
                                  "temperature",
                                  "top_p",
                                  "top_k",
                                  "min_p",
                                  "repetition_penalty",
                                  "presence_penalty",
                                  "frequency_penalty",
                                  "seed",
                                  "stop",
                                  "stop_token_ids",
                                  "ignore_eos",
                                  "logprobs",
                                  "logit_bias",
                                  "speculative",
                                  "response_format",
                                  "json_schema",
                                  "grammar",
                                  "regex",
                                  "tool_choice"};

Status ReadSpeculative(const Json& j, std::optional<SpeculativeParams>* out) {
  const Json* v = Field(j, "speculative");
  if (v == nullptr) return Status::Ok();
  SpeculativeParams p;
  Status s = SpeculativeFromJson(*v, &p);
  VLS_RETURN_IF_ERROR(Named(s, s.param()));
  *out = p;
  return Status::Ok();
}

}  // namespace

Status SpeculativeFromJson(const Json& v, SpeculativeParams* out) {
  auto bad = [](const std::string& why) {
    return InvalidArgument("\"speculative\" " + why).WithParam("speculative");
  };
  if (!v.is_object()) return bad("must be an object {\"method\": \"off\" | \"ngram\" | \"draft\"}");
  for (const auto& [key, value] : v.items()) {
    if (key != "method" && key != "draft_tokens") {
      return bad("has an unknown field " + JsonSnippet(Json(key)));
    }
  }
  const Json* method = Field(v, "method");
  if (method == nullptr || !method->is_string()) {
    return bad("needs \"method\": \"off\", \"ngram\" or \"draft\"");
  }
  const std::string m = method->get<std::string>();
  if (m != "off" && m != "ngram" && m != "draft") {
    return bad("method " + JsonSnippet(Json(m)) + " is not \"off\", \"ngram\" or \"draft\"");
  }
  int64_t k = kDefaultDraftTokens;
  bool k_set = false;
  if (const Json* d = Field(v, "draft_tokens")) {
    VLS_RETURN_IF_ERROR(ReadJsonInt(*d, "\"speculative.draft_tokens\"", 1, kMaxDraftTokens, &k)
                            .WithParam("speculative.draft_tokens"));
    k_set = true;
  }
  if (m == "off" && k_set) return bad("draft_tokens needs a method other than off");
  *out = SpeculativeParams();
  out->draft_tokens = m == "off" ? 0 : static_cast<int>(k);
  out->source = m == "draft" ? DraftSource::kModel : DraftSource::kNgram;
  return Status::Ok();
}

StatusOr<ChatRequest> ChatRequestFromJson(const Json& j, const SamplingParams& defaults) {
  if (!j.is_object()) return InvalidArgument("chat request: must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) return Bad(key, "is not a known field");
  }
  ChatRequest r;
  r.sampling = defaults;
  auto messages = j.find("messages");
  if (messages == j.end() || !messages->is_array() || messages->empty()) {
    return Bad("messages", "must be a non-empty list of messages");
  }
  r.messages = *messages;
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) return Bad("tools", "must be a list");
    r.tools = *t;
  }
  VLS_RETURN_IF_ERROR(ReadBool(j, "add_generation_prompt", &r.add_generation_prompt, nullptr));
  bool thinking = false, thinking_set = false;
  VLS_RETURN_IF_ERROR(ReadBool(j, "enable_thinking", &thinking, &thinking_set));
  if (thinking_set) r.enable_thinking = thinking;
  if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
    if (!k->is_object()) return Bad("chat_template_kwargs", "must be an object");
    r.template_kwargs = *k;
  }
  int64_t v = 0;
  bool set = false;
  VLS_RETURN_IF_ERROR(ReadInt(j, "max_tokens", 1, std::numeric_limits<int32_t>::max(), &v, &set));
  if (set) r.max_tokens = static_cast<int>(v);
  SamplingParams& s = r.sampling;
  VLS_RETURN_IF_ERROR(ReadFloat(j, "temperature", &s.temperature));
  VLS_RETURN_IF_ERROR(ReadFloat(j, "top_p", &s.top_p));
  VLS_RETURN_IF_ERROR(ReadFloat(j, "min_p", &s.min_p));
  VLS_RETURN_IF_ERROR(ReadFloat(j, "repetition_penalty", &s.repetition_penalty));
  VLS_RETURN_IF_ERROR(ReadFloat(j, "presence_penalty", &s.presence_penalty));
  VLS_RETURN_IF_ERROR(ReadFloat(j, "frequency_penalty", &s.frequency_penalty));
  set = false;
  VLS_RETURN_IF_ERROR(ReadInt(j, "top_k", 0, std::numeric_limits<int32_t>::max(), &v, &set));
  if (set) s.top_k = static_cast<int>(v);
  if (const Json* seed = Field(j, "seed")) {
    // The whole uint64 range (ReadJsonInt stops at 2^63 - 1).
    if (seed->is_number_unsigned()) {
      s.seed = seed->get<uint64_t>();
    } else {
      int64_t i = 0;
      VLS_RETURN_IF_ERROR(Named(
          ReadJsonInt(*seed, Quoted("seed"), 0, std::numeric_limits<int64_t>::max(), &i), "seed"));
      s.seed = static_cast<uint64_t>(i);
    }
  }
  if (auto stop = j.find("stop"); stop != j.end() && !stop->is_null()) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& x : *stop) {
        if (!x.is_string()) return Bad("stop", "must be a string or a list of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or a list of strings");
    }
  }
  if (const Json* ids = Field(j, "stop_token_ids")) {
    if (!ids->is_array()) return Bad("stop_token_ids", "must be a list of token ids");
    r.stop_token_ids.reserve(ids->size());
    for (const Json& x : *ids) {
      int64_t id = 0;
      VLS_RETURN_IF_ERROR(Named(
          ReadJsonInt(x, "each of \"stop_token_ids\"", 0, std::numeric_limits<int32_t>::max(), &id),
          "stop_token_ids"));
      r.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  VLS_RETURN_IF_ERROR(ReadBool(j, "ignore_eos", &r.ignore_eos, nullptr));
  set = false;
  VLS_RETURN_IF_ERROR(ReadInt(j, "logprobs", -1, kMaxTopLogprobs, &v, &set));
  if (set) r.logprobs = static_cast<int>(v);
  if (auto bias = j.find("logit_bias"); bias != j.end() && !bias->is_null()) {
    if (!bias->is_object()) return Bad("logit_bias", "must be an object of token id -> bias");
    for (const auto& [key, value] : bias->items()) {
      int32_t id = 0;
      if (!ParseTokenIdKey(key, &id)) {
        return Bad("logit_bias", "key " + JsonSnippet(Json(key)) + " is not a token id");
      }
      double b = 0;
      VLS_RETURN_IF_ERROR(Named(ReadJsonNumber(value, "\"logit_bias\" of token " + key,
                                               -std::numeric_limits<double>::max(),
                                               std::numeric_limits<double>::max(), &b),
                                "logit_bias"));
      // OpenAI clamps biases to [-100, 100].
      s.logit_bias.emplace_back(id, static_cast<float>(std::clamp(b, -100.0, 100.0)));
    }
  }
  VLS_RETURN_IF_ERROR(ReadSpeculative(j, &r.speculative));
  Status so = StructuredOutputFromJson(j, &r.structured);
  VLS_RETURN_IF_ERROR(Named(so, so.param()));
  // tool_choice "none": the template sees no tools (as the server does).
  if (const Json* choice = Field(j, "tool_choice"); choice != nullptr && *choice == "none") {
    r.tools = nullptr;
  }
  return r;
}

Status ParseUntrustedOrderedJson(std::string_view label, std::string_view text, Json* out,
                                 const JsonParseOptions& options) {
  // The rules first (into a std::map DOM: n log n, and it refuses repeated keys), then the
  // ordered build by appending.
  nlohmann::json checked;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, text, &checked, options));
  checked = nullptr;
  try {
    Json root;
    OrderedBuilder builder(&root);
    if (!Json::sax_parse(text.begin(), text.end(), &builder, Json::input_format_t::json,
                         /*strict=*/true)) {
      return Status(options.code, std::string(label) + ": invalid JSON");
    }
    *out = std::move(root);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(label) + ": out of memory while parsing JSON");
  } catch (const std::exception& e) {
    return Status(options.code, std::string(label) + ": invalid JSON: " + e.what());
  }
  return Status::Ok();
}

StatusOr<ChatRequest> ChatRequestFromJsonText(std::string_view text,
                                              const SamplingParams& defaults) {
  Json j;
  VLS_RETURN_IF_ERROR(
      ParseUntrustedOrderedJson("chat request", text, &j, {.code = StatusCode::kInvalidArgument}));
  return ChatRequestFromJson(j, defaults);
}

}  // namespace vls
