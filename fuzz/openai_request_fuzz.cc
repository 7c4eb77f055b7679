// Fuzz target for the server's request parsing (src/server/openai_request.h): an HTTP body is
// parsed with the untrusted-JSON rules, then read as a /v1/chat/completions and a
// /v1/completions request.
//
// Every input must give a Status or a request that keeps the documented rules (n = 1 implied,
// top_logprobs only with logprobs and within 0..20, the runtime's structured tool mode matching
// the server's tool_choice, tools only with a tool choice other than
// "none", stop strings within the limit); a refusal must map to an OpenAI error with an HTTP
// status in 400..599 whose body serialises. Nothing may throw.
//
// Real fuzzing: scripts/fuzz.sh 600 openai_request. Without libFuzzer,
// openai_request_fuzz_replay (a ctest) runs it over tests/corpus/openai_request and fixed-seed
// mutations.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/chat_json.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "openai_request_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckRefusal(const vls::Status& s) {
  const vls::server::OpenAiError e = vls::server::ErrorFromStatus(s);
  if (e.status < 400 || e.status > 599) Fail("status out of range", s.ToString());
  if (e.message.empty()) Fail("empty error message", s.ToString());
  const std::string body = vls::server::DumpJson(vls::server::ErrorBody(e));
  if (body.find("\"error\"") == std::string::npos) Fail("error body", body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json body;
  vls::Status s = vls::ParseUntrustedOrderedJson("request body", text, &body);
  if (!s.ok()) {
    CheckRefusal(s);
    return 0;
  }
  vls::server::RequestLimits limits;
  limits.max_stop = 4;
  auto chat = vls::server::ParseChatCompletionRequest(body, vls::SamplingParams{}, limits);
  if (!chat.ok()) {
    CheckRefusal(chat.status());
  } else {
    const auto& r = *chat;
    if (r.top_logprobs < 0 || r.top_logprobs > 20 || (!r.logprobs && r.top_logprobs != 0)) {
      Fail("top_logprobs", std::to_string(r.top_logprobs));
    }
    if (r.chat.logprobs != (r.logprobs ? r.top_logprobs : -1)) Fail("logprobs", "mismatch");
    if (r.tool_choice == vls::server::ToolChoice::kNone && !r.chat.tools.is_null()) {
      Fail("tools kept with tool_choice none", "");
    }
    if (r.chat.stop.size() > limits.max_stop) Fail("stop limit", "");
    // The server's reading of tool_choice and the runtime's (StructuredOutputFromJson) agree.
    using Tools = vls::StructuredOutput::Tools;
    const Tools mode = r.chat.structured.tools;
    if ((r.tool_choice == vls::server::ToolChoice::kRequired) != (mode == Tools::kRequired) ||
        (r.tool_choice == vls::server::ToolChoice::kNamed) != (mode == Tools::kNamed) ||
        (mode == Tools::kNamed && r.chat.structured.tool_name != r.tool_name)) {
      Fail("tool_choice read twice, two answers", r.tool_name);
    }
    if (mode != Tools::kFree && !r.parse_tool_calls()) Fail("enforced calls not parsed", "");
    if (r.include_usage && !r.stream) Fail("include_usage without stream", "");
    const vls::VideoSamplingOptions& v = r.chat.video;
    if (v.fps && !(*v.fps > 0 && *v.fps <= limits.max_video_fps)) Fail("fps out of bounds", "");
    for (const auto& n : {v.max_frames, v.num_frames}) {
      if (n && (*n < 1 || *n > limits.max_video_frames)) Fail("frames out of bounds", "");
    }
    if (v.fps && v.num_frames) Fail("fps with num_frames", "");
    // Every video_url part reaches the pipeline as the "video" part the template places.
    for (const auto& m : r.chat.messages) {
      auto c = m.find("content");
      if (c == m.end() || !c->is_array()) continue;
      for (const auto& part : *c) {
        auto t = part.is_object() ? part.find("type") : part.end();
        if (t != part.end() && *t == "video_url") Fail("video_url kept", "");
      }
    }
    (void)vls::server::DumpJson(r.chat.messages);
  }
  auto completion = vls::server::ParseCompletionRequest(body, vls::SamplingParams{}, limits);
  if (!completion.ok()) {
    CheckRefusal(completion.status());
  } else if (completion->prompt.has_value() == completion->tokens.has_value()) {
    Fail("completion prompt", "exactly one of text and tokens must be set");
  } else if (completion->logprobs < -1 || completion->logprobs > 5) {
    Fail("completion logprobs", std::to_string(completion->logprobs));
  }
  return 0;
}
