#include "cli/text_commands.h"

#include <cstdio>
#include <iostream>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cli/args.h"
#include "cli/load_flags.h"
#include "io/untrusted_json.h"
#include "runtime/chat_json.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {
namespace {

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
  nlohmann::json j;
  VLS_RETURN_IF_ERROR(
      ParseUntrustedJson("input", line, &j, {.code = StatusCode::kInvalidArgument}));
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("bytes_b64") && j["bytes_b64"].is_string()) {
    return DecodeBase64(j["bytes_b64"].get<std::string>());
  }
  return InvalidArgument("input must be a JSON string or {\"bytes_b64\": \"...\"}");
}

StatusOr<std::vector<int32_t>> DetokenizeInput(const std::string& line) {
  nlohmann::json j;
  VLS_RETURN_IF_ERROR(
      ParseUntrustedJson("input", line, &j, {.code = StatusCode::kInvalidArgument}));
  if (!j.is_array()) return InvalidArgument("input must be a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const auto& e : j) {
    int64_t id = 0;
    VLS_RETURN_IF_ERROR(ReadJsonInt(e, "token ids", 0, std::numeric_limits<int32_t>::max(), &id));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// A chat-template input line: a JSON object whose "messages" is a list. Keys that are template
// variables pass through as they are; the typed ones are checked here: "add_generation_prompt"
// and "enable_thinking" are true or false when present (null is refused: it would silently mean
// false) and "tools" a list or null.
StatusOr<nlohmann::ordered_json> ChatTemplateInput(const std::string& line) {
  nlohmann::ordered_json req;
  VLS_RETURN_IF_ERROR(
      ParseUntrustedOrderedJson("input", line, &req, {.code = StatusCode::kInvalidArgument}));
  if (!req.is_object()) {
    return InvalidArgument("input must be a JSON object, not " + JsonTypeName(req));
  }
  auto messages = req.find("messages");
  if (messages == req.end() || !messages->is_array()) {
    return InvalidArgument("input needs \"messages\": a list of messages");
  }
  for (const char* key : {"add_generation_prompt", "enable_thinking"}) {
    auto it = req.find(key);
    if (it == req.end()) continue;
    bool b = false;
    VLS_RETURN_IF_ERROR(ReadJsonBool(*it, std::string("\"") + key + "\"", &b));
  }
  if (auto tools = req.find("tools");
      tools != req.end() && !tools->is_null() && !tools->is_array()) {
    return InvalidArgument("\"tools\" must be a list or null, not " + JsonTypeName(*tools));
  }
  return req;
}

std::string JsonString(const std::string& s) { return DumpJsonSafe(nlohmann::json(s)); }

// Runs `fn` on every stdin line. A bad line prints {"error": ...} in its place; after the other
// lines the command fails with the first bad line's code (2 for a refused input line).
template <typename Fn>
Status ForEachLine(const char* cmd, Fn fn) {
  std::ios::sync_with_stdio(false);
  std::string line;
  size_t line_no = 0;
  size_t failed = 0;
  Status first = Status::Ok();
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Whatever escapes `fn` (out of memory, a bug's exception) is this line's error, never the
    // end of the command.
    StatusOr<std::string> out = Internal("no output");
    try {
      out = fn(line);
    } catch (const std::bad_alloc&) {
      out = ResourceExhausted("out of memory while handling the line");
    } catch (const std::exception& e) {
      out = Internal(std::string("unexpected error while handling the line: ") + e.what());
    }
    if (out.ok()) {
      std::cout << *out << '\n';
      continue;
    }
    const std::string msg = "line " + std::to_string(line_no) + ": " + out.status().message();
    std::fprintf(stderr, "vlstack %s: %s\n", cmd, msg.c_str());
    std::cout << DumpJsonSafe(nlohmann::json{{"error", msg}}) << '\n';
    if (failed++ == 0) first = Status(out.status().code(), msg);
  }
  std::cout.flush();
  if (failed == 0) return Status::Ok();
  return Status(first.code(), std::to_string(failed) + " of " + std::to_string(line_no) +
                                  " input lines failed (the first: " + first.message() + ")");
}

}  // namespace

CommandSpec TokenizeSpec() {
  CommandSpec spec;
  spec.name = "tokenize";
  spec.usage =
      "usage: vlstack tokenize --tokenizer PATH < lines\n"
      "\n"
      "Each stdin line is a JSON string, or {\"bytes_b64\": \"...\"} for raw bytes that may not\n"
      "be UTF-8; each stdout line is the JSON array of its token ids (special tokens written in\n"
      "the text are recognised). A bad line gets {\"error\": ...} in its place.\n"
      "\n"
      "  --tokenizer PATH     a tokenizer.json, or a model folder holding one (required)\n"
      "  --help               this text\n";
  spec.value_flags = {"tokenizer"};
  spec.example =
      "  echo '\"Hello, world\"' | vlstack tokenize --tokenizer ./model/tokenizer.json\n";
  return spec;
}

CommandSpec DetokenizeSpec() {
  CommandSpec spec;
  spec.name = "detokenize";
  spec.usage =
      "usage: vlstack detokenize --tokenizer PATH [options] < lines\n"
      "\n"
      "Each stdin line is a JSON array of token ids; each stdout line is the decoded text as a\n"
      "JSON string. A bad line gets {\"error\": ...} in its place.\n"
      "\n"
      "  --tokenizer PATH     a tokenizer.json, or a model folder holding one (required)\n"
      "  --skip-special-tokens  leave special tokens out of the text (default: kept)\n"
      "  --stream             decode through the streaming decoder one id at a time, as\n"
      "                       generation does (default: all ids at once); the text is the same\n"
      "  --help               this text\n";
  spec.value_flags = {"tokenizer"};
  spec.bool_flags = {"skip-special-tokens", "stream"};
  spec.example =
      "  echo '[9707, 11, 1879]' | vlstack detokenize --tokenizer ./model/tokenizer.json\n";
  return spec;
}

CommandSpec ChatTemplateSpec() {
  CommandSpec spec;
  spec.name = "chat-template";
  spec.usage =
      "usage: vlstack chat-template (--model DIR | --template FILE) < lines\n"
      "\n"
      "Each stdin line is a JSON object {\"messages\": [...], \"tools\": [...],\n"
      "\"add_generation_prompt\": bool, \"enable_thinking\": bool, ...} (messages as transformers\n"
      "takes them); each stdout line is the rendered prompt as a JSON string. A bad line gets\n"
      "{\"error\": ...} in its place.\n"
      "\n"
      "  --model DIR          model folder whose chat template to use: chat_template.jinja,\n"
      "                       chat_template.json or tokenizer_config.json (one of the two is\n"
      "                       required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --template FILE      a chat template file instead: .jinja text, or JSON with a\n"
      "                       \"chat_template\" key\n"
      "  --help               this text\n";
  spec.value_flags = {"model", "template"};
  spec.example =
      "  echo '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}' \\\n"
      "      | vlstack chat-template --model ./model\n";
  return spec;
}

namespace {

StatusOr<std::unique_ptr<tok::Tokenizer>> LoadTokenizer(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string path, args.Require("tokenizer"));
  auto tok = tok::Tokenizer::FromFile(path);
  if (!tok.ok()) return tok.status().WithContext("--tokenizer");
  return std::move(*tok);
}

Status Tokenize(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> tok, LoadTokenizer(args));
  return ForEachLine("tokenize", [&](const std::string& line) -> StatusOr<std::string> {
    VLS_ASSIGN_OR_RETURN(std::string text, TokenizeInput(line));
    VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(text));
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(ids[i]);
    }
    out += ']';
    return out;
  });
}

Status Detokenize(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> tok, LoadTokenizer(args));
  const bool skip = args.Has("skip-special-tokens");
  const bool stream = args.Has("stream");
  return ForEachLine("detokenize", [&](const std::string& line) -> StatusOr<std::string> {
    VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, DetokenizeInput(line));
    if (!stream) return JsonString(tok->Decode(ids, skip));
    // --stream: the same text assembled through the streaming decoder (for checking it).
    tok::StreamDecoder dec(tok.get(), skip);
    std::string text;
    for (int32_t id : ids) text += dec.Feed(id);
    text += dec.Finish();
    return JsonString(text);
  });
}

StatusOr<std::string> ChatTemplateSource(const Args& args) {
  if (args.Has("model") == args.Has("template")) {
    return InvalidArgument("give exactly one of --model DIR or --template FILE");
  }
  if (args.Has("model")) {
    VLS_ASSIGN_OR_RETURN(std::string dir, ModelDirFlag(args));
    return tok::LoadChatTemplateSource(dir);
  }
  auto source = tok::LoadChatTemplateFile(*args.Get("template"));
  if (!source.ok()) return source.status().WithContext("--template");
  return source;
}

Status ChatTemplate(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string source, ChatTemplateSource(args));
  VLS_ASSIGN_OR_RETURN(jinja::Template tmpl, jinja::Template::Parse(source));
  return ForEachLine("chat-template", [&](const std::string& line) -> StatusOr<std::string> {
    VLS_ASSIGN_OR_RETURN(nlohmann::ordered_json req, ChatTemplateInput(line));
    VLS_ASSIGN_OR_RETURN(std::string prompt, tok::RenderChat(tmpl, req));
    return JsonString(prompt);
  });
}

}  // namespace

int RunTokenize(int argc, char** argv) { return RunCommand(TokenizeSpec(), argc, argv, Tokenize); }

int RunDetokenize(int argc, char** argv) {
  return RunCommand(DetokenizeSpec(), argc, argv, Detokenize);
}

int RunChatTemplate(int argc, char** argv) {
  return RunCommand(ChatTemplateSpec(), argc, argv, ChatTemplate);
}

}  // namespace vls::cli
