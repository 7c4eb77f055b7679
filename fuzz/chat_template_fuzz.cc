// Fuzz target for the chat template engine (jinja::Template::Parse, tok::RenderChat).
//
// Input: the template source, then "\n----\n", then the chat request as JSON (parsed with
// ParseUntrustedJson; when it is missing or not a request, a fixed two-turn conversation is
// used). Every input must give a Status or an output within the render limits; a crash, a
// sanitizer report, an exception or an output past the limit fails.
//
// The render limits are lowered (RenderLimits) so that one run stays in milliseconds; the limits
// are the same code paths whatever their values.
//
// Real fuzzing: scripts/fuzz.sh 600 chat_template. Without libFuzzer, `chat_template_fuzz_replay`
// (replay_main.cc, a ctest) runs this target over tests/corpus/chat_template and mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "io/untrusted_json.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_template.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "chat_template_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

constexpr std::string_view kSeparator = "\n----\n";
constexpr std::string_view kDefaultRequest =
    R"({"messages": [{"role": "system", "content": "sys"},
                     {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]},
                     {"role": "assistant", "content": "<think>r</think>ok",
                      "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
                     {"role": "tool", "content": "42"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "add_generation_prompt": true})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(kSeparator);
  const std::string_view source = input.substr(0, sep);
  nlohmann::ordered_json request;
  bool have_request = false;
  if (sep != std::string_view::npos) {
    vls::JsonParseOptions opt;
    opt.code = vls::StatusCode::kInvalidArgument;
    have_request =
        vls::ParseUntrustedJson("request", input.substr(sep + kSeparator.size()), &request, opt)
            .ok();
  }
  if (!have_request) {
    if (!vls::ParseUntrustedJson("default request", kDefaultRequest, &request).ok()) {
      Fail("default request does not parse", "");
    }
  }

  auto tmpl = vls::jinja::Template::Parse(source);
  if (!tmpl.ok()) {
    if (tmpl.status().message().empty()) Fail("parse error without a message", "");
    return 0;
  }
  vls::jinja::RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_alloc_bytes = 16 << 20;
  auto out = vls::tok::RenderChat(*tmpl, request, limits);
  if (!out.ok()) {
    if (out.status().message().empty()) Fail("render error without a message", "");
    if (out.status().code() == vls::StatusCode::kInternal) {
      Fail("internal error", out.status().ToString());
    }
    return 0;
  }
  if (out->size() > static_cast<size_t>(limits.max_output_bytes)) {
    Fail("output past max_output_bytes", std::to_string(out->size()));
  }
  return 0;
}
