#include "server/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "io/untrusted_json.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;  // keeps the model's key order in "arguments"

std::string_view TrimJsonSpace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`: the bytes that could
// still grow into the tag and must be held back.
size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// One whole block, open tag to close tag: a call when valid, else its text.
void EmitBlock(std::string_view block, ToolCallSplit* out) {
  if (block.size() <= kMaxToolCallBlockBytes) {
    const std::string_view body = block.substr(
        kToolCallOpenTag.size(), block.size() - kToolCallOpenTag.size() - kToolCallCloseTag.size());
    ToolCall call;
    if (ParseToolCallBody(body, &call)) {
      out->calls.push_back(std::move(call));
      return;
    }
  }
  out->content.append(block);
}

}  // namespace

bool ParseToolCallBody(std::string_view body, ToolCall* call) {
  const JsonParseOptions options{.code = StatusCode::kInvalidArgument};
  Json j;
  if (!ParseUntrustedJson("tool call", TrimJsonSpace(body), &j, options).ok() || !j.is_object()) {
    return false;
  }
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return false;
  }
  std::string arguments = "{}";
  const auto args = j.find("arguments");
  if (args != j.end()) {
    if (args->is_object()) {
      arguments = DumpJsonSafe(*args);
    } else if (args->is_string()) {
      // OpenAI's encoding: the object as JSON text inside a string.
      Json inner;
      if (!ParseUntrustedJson("tool call arguments", args->get_ref<const std::string&>(), &inner,
                              options)
               .ok() ||
          !inner.is_object()) {
        return false;
      }
      arguments = DumpJsonSafe(inner);
    } else {
      return false;
    }
  }
  call->name = name->get<std::string>();
  call->arguments = std::move(arguments);
  return true;
}

ToolCallSplit SplitToolCalls(std::string_view text) {
  ToolCallSplit out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kToolCallOpenTag, pos);
    if (open == std::string_view::npos) break;
    out.content.append(text.substr(pos, open - pos));
    const size_t close = text.find(kToolCallCloseTag, open + kToolCallOpenTag.size());
    if (close == std::string_view::npos) {
      pos = open;  // unterminated: text to the end
      break;
    }
    const size_t end = close + kToolCallCloseTag.size();
    EmitBlock(text.substr(open, end - open), &out);
    pos = end;
  }
  if (pos < text.size()) out.content.append(text.substr(pos));
  return out;
}

ToolCallSplit ToolCallStream::Push(std::string_view delta) {
  ToolCallSplit out;
  held_.append(delta);
  Run(&out);
  return out;
}

ToolCallSplit ToolCallStream::Finish() {
  ToolCallSplit out;
  out.content = std::move(held_);  // a tag prefix, an unfinished block or a close-tag prefix
  held_.clear();
  state_ = State::kText;
  search_from_ = 0;
  return out;
}

// Consumes held_ from `begin` as far as it is certain, then drops the consumed bytes once (a long
// delta holding many blocks costs linear time). In kBlock, held_ then starts at the open tag.
void ToolCallStream::Run(ToolCallSplit* out) {
  const std::string_view text = held_;
  size_t begin = 0;
  // Releases text[begin, end) as content.
  auto release = [&](size_t end) {
    out->content.append(text.substr(begin, end - begin));
    begin = end;
  };
  for (bool more = true; more;) {
    const std::string_view rest = text.substr(begin);
    switch (state_) {
      case State::kText: {
        const size_t open = rest.find(kToolCallOpenTag);
        if (open == std::string_view::npos) {
          release(text.size() - PartialTagSuffix(rest, kToolCallOpenTag));
          more = false;
          break;
        }
        release(begin + open);
        state_ = State::kBlock;
        search_from_ = kToolCallOpenTag.size();
        break;
      }
      case State::kBlock: {
        const size_t close = rest.find(kToolCallCloseTag, search_from_);
        if (close != std::string_view::npos) {
          const size_t end = close + kToolCallCloseTag.size();
          EmitBlock(rest.substr(0, end), out);
          begin += end;
          state_ = State::kText;
          break;
        }
        // The close tag starts at rest.size() - (kToolCallCloseTag.size() - 1) or later, so the
        // block will be at least rest.size() + 1 bytes long.
        if (rest.size() >= kMaxToolCallBlockBytes) {
          release(text.size() - PartialTagSuffix(rest, kToolCallCloseTag));
          state_ = State::kOversize;
          break;
        }
        search_from_ =
            std::max(kToolCallOpenTag.size(), rest.size() - (kToolCallCloseTag.size() - 1));
        more = false;
        break;
      }
      case State::kOversize: {
        const size_t close = rest.find(kToolCallCloseTag);
        if (close == std::string_view::npos) {
          release(text.size() - PartialTagSuffix(rest, kToolCallCloseTag));
          more = false;
          break;
        }
        release(begin + close + kToolCallCloseTag.size());
        state_ = State::kText;
        break;
      }
    }
  }
  held_.erase(0, begin);
}

}  // namespace vls::server
