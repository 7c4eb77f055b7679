#include "cli/text_commands.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {
namespace {

// `--name value` / `--name=value` / `--flag`; anything else is an error.
struct Flags {
  std::map<std::string, std::string> values;
};

StatusOr<Flags> ParseFlags(int argc, char** argv, const std::set<std::string>& with_value,
                           const std::set<std::string>& boolean) {
  Flags f;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) return InvalidArgument("unexpected argument '" + a + "'");
    std::string name = a.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (with_value.count(name) != 0) {
      if (!inline_value) {
        if (i + 1 >= argc) return InvalidArgument("--" + name + " needs a value");
        value = argv[++i];
      }
    } else if (boolean.count(name) != 0) {
      if (inline_value) return InvalidArgument("--" + name + " takes no value");
      value = "1";
    } else {
      return InvalidArgument("unknown flag --" + name);
    }
    f.values[name] = value;
  }
  return f;
}

int Fail(const char* cmd, const Status& s) {
  std::fprintf(stderr, "vlstack %s: %s\n", cmd, s.ToString().c_str());
  return 2;
}

StatusOr<std::string> DecodeBase64(std::string_view in) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : in) {
    if (c == '=') {
      ++pad;
      continue;
    }
    const size_t v = kAlphabet.find(c);
    if (v == std::string_view::npos || pad > 0) return InvalidArgument("bytes_b64 is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2) return InvalidArgument("bytes_b64 is not base64");
  return out;
}

// The text of one tokenize input line: a JSON string or {"bytes_b64": "..."}.
StatusOr<std::string> TokenizeInput(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("input is not valid JSON");
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("bytes_b64") && j["bytes_b64"].is_string()) {
    return DecodeBase64(j["bytes_b64"].get<std::string>());
  }
  return InvalidArgument("input must be a JSON string or {\"bytes_b64\": \"...\"}");
}

StatusOr<std::vector<int32_t>> DetokenizeInput(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("input is not valid JSON");
  if (!j.is_array()) return InvalidArgument("input must be a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const auto& e : j) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX) {
      return InvalidArgument("token ids must be integers in [0, 2^31)");
    }
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return ids;
}

std::string JsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Runs `fn` on every stdin line. A bad line prints {"error": ...} in its place and the command
// exits 1 after the other lines.
template <typename Fn>
int ForEachLine(const char* cmd, Fn fn) {
  std::ios::sync_with_stdio(false);
  std::string line;
  size_t line_no = 0;
  int rc = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    StatusOr<std::string> out = fn(line);
    if (out.ok()) {
      std::cout << *out << '\n';
    } else {
      const std::string msg = "line " + std::to_string(line_no) + ": " + out.status().message();
      std::fprintf(stderr, "vlstack %s: %s\n", cmd, msg.c_str());
      std::cout << nlohmann::json{{"error", msg}}.dump(-1, ' ', false,
                                                       nlohmann::json::error_handler_t::replace)
                << '\n';
      rc = 1;
    }
  }
  std::cout.flush();
  return rc;
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv, {"tokenizer"}, {});
  if (!flags.ok()) return Fail("tokenize", flags.status());
  if (flags->values.count("tokenizer") == 0) {
    return Fail("tokenize", InvalidArgument("--tokenizer PATH is required"));
  }
  auto tok = tok::Tokenizer::FromFile(flags->values["tokenizer"]);
  if (!tok.ok()) return Fail("tokenize", tok.status());
  return ForEachLine("tokenize", [&](const std::string& line) -> StatusOr<std::string> {
    VLS_ASSIGN_OR_RETURN(std::string text, TokenizeInput(line));
    VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, (*tok)->Encode(text));
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(ids[i]);
    }
    out += ']';
    return out;
  });
}

int RunDetokenize(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv, {"tokenizer"}, {"skip-special-tokens", "stream"});
  if (!flags.ok()) return Fail("detokenize", flags.status());
  if (flags->values.count("tokenizer") == 0) {
    return Fail("detokenize", InvalidArgument("--tokenizer PATH is required"));
  }
  const bool skip = flags->values.count("skip-special-tokens") != 0;
  const bool stream = flags->values.count("stream") != 0;
  auto tok = tok::Tokenizer::FromFile(flags->values["tokenizer"]);
  if (!tok.ok()) return Fail("detokenize", tok.status());
  return ForEachLine("detokenize", [&](const std::string& line) -> StatusOr<std::string> {
    VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, DetokenizeInput(line));
    if (!stream) return JsonString((*tok)->Decode(ids, skip));
    // --stream: the same text assembled through the streaming decoder (for checking it).
    tok::StreamDecoder dec(tok->get(), skip);
    std::string text;
    for (int32_t id : ids) text += dec.Feed(id);
    text += dec.Finish();
    return JsonString(text);
  });
}

int RunChatTemplate(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv, {"model", "template"}, {});
  if (!flags.ok()) return Fail("chat-template", flags.status());
  const bool has_model = flags->values.count("model") != 0;
  const bool has_template = flags->values.count("template") != 0;
  if (has_model == has_template) {
    return Fail("chat-template",
                InvalidArgument("give exactly one of --model DIR or --template FILE"));
  }
  auto source = has_model ? tok::LoadChatTemplateSource(flags->values["model"])
                          : tok::LoadChatTemplateFile(flags->values["template"]);
  if (!source.ok()) return Fail("chat-template", source.status());
  auto tmpl = jinja::Template::Parse(*source);
  if (!tmpl.ok()) return Fail("chat-template", tmpl.status());
  return ForEachLine("chat-template", [&](const std::string& line) -> StatusOr<std::string> {
    nlohmann::ordered_json req =
        nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (req.is_discarded()) return InvalidArgument("input is not valid JSON");
    VLS_ASSIGN_OR_RETURN(std::string prompt, tok::RenderChat(*tmpl, req));
    return JsonString(prompt);
  });
}

}  // namespace vls::cli
