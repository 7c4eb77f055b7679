#include "runtime/chat_json.h"

#include <cmath>
#include <limits>
#include <string>

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

Status Bad(const std::string& key, const std::string& why) {
  return InvalidArgument("chat request: \"" + key + "\" " + why);
}

// Reads an optional field; null or absent leaves *out as is.
Status ReadFloat(const Json& j, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return Bad(key, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
    return Bad(key, "must be a finite number");
  }
  *out = static_cast<float>(v);
  return Status::Ok();
}

Status ReadInt(const Json& j, const char* key, int64_t lo, int64_t hi, int64_t* out, bool* set) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) return Bad(key, "must be an integer");
  const bool negative = it->is_number_unsigned() ? false : it->get<int64_t>() < 0;
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  const int64_t v = negative ? it->get<int64_t>() : static_cast<int64_t>(it->get<uint64_t>());
  if (v < lo || v > hi) {
    return Bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = v;
  if (set != nullptr) *set = true;
  return Status::Ok();
}

Status ReadBool(const Json& j, const char* key, bool* out, bool* set) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return Bad(key, "must be true or false");
  *out = it->get<bool>();
  if (set != nullptr) *set = true;
  return Status::Ok();
}

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
                                  "logit_bias"};

}  // namespace

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
  if (auto seed = j.find("seed"); seed != j.end() && !seed->is_null()) {
    if (!seed->is_number_unsigned() && !(seed->is_number_integer() && seed->get<int64_t>() >= 0)) {
      return Bad("seed", "must be a non-negative integer");
    }
    s.seed = seed->get<uint64_t>();
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
  if (auto ids = j.find("stop_token_ids"); ids != j.end() && !ids->is_null()) {
    if (!ids->is_array()) return Bad("stop_token_ids", "must be a list of token ids");
    for (const Json& x : *ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Bad("stop_token_ids", "must be a list of non-negative token ids");
      }
      r.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  VLS_RETURN_IF_ERROR(ReadBool(j, "ignore_eos", &r.ignore_eos, nullptr));
  set = false;
  VLS_RETURN_IF_ERROR(ReadInt(j, "logprobs", -1, kMaxTopLogprobs, &v, &set));
  if (set) r.logprobs = static_cast<int>(v);
  if (auto bias = j.find("logit_bias"); bias != j.end() && !bias->is_null()) {
    if (!bias->is_object()) return Bad("logit_bias", "must be an object of token id -> bias");
    for (const auto& [key, value] : bias->items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return Bad("logit_bias", "key '" + key + "' is not a token id");
      }
      if (!value.is_number() || !std::isfinite(value.get<double>())) {
        return Bad("logit_bias", "value of token " + key + " must be a finite number");
      }
      // OpenAI clamps biases to [-100, 100].
      const double b = std::clamp(value.get<double>(), -100.0, 100.0);
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
  }
  return r;
}

StatusOr<ChatRequest> ChatRequestFromJsonText(std::string_view text,
                                              const SamplingParams& defaults) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("chat request: not valid JSON");
  return ChatRequestFromJson(j, defaults);
}

}  // namespace vls
