// Fuzz target for the tool calls a model writes (server/tool_calls.h): SplitToolCalls on the
// whole text and ToolCallStream over deltas must agree for every input.
//
// The first byte chooses the cuts; the rest is the text. The text is streamed whole, cut once at
// a point derived from the first byte, cut every (first byte % 13 + 1) bytes, and byte by byte;
// each must give exactly SplitToolCalls of the text. The result must also keep the bytes: the
// content is the text with each call's block taken out, so it is never longer than the text, and
// every call has a name and compact object arguments that parse back as an object.
//
// Real fuzzing: scripts/fuzz.sh 600 tool_calls. Without libFuzzer, `tool_calls_fuzz_replay` (a
// ctest) runs this target over tests/corpus/tool_calls and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace {

using vls::server::ToolCallSplit;
using vls::server::ToolCallStream;

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "tool_calls_fuzz: %s (input of %zu bytes)\n", what, text.size());
  std::abort();
}

void Add(ToolCallSplit part, ToolCallSplit* all) {
  all->content += part.content;
  for (auto& c : part.calls) all->calls.push_back(std::move(c));
}

ToolCallSplit Stream(std::string_view text, const std::vector<size_t>& cuts) {
  ToolCallStream stream;
  ToolCallSplit all;
  size_t pos = 0;
  for (const size_t cut : cuts) {
    Add(stream.Push(text.substr(pos, cut - pos)), &all);
    pos = cut;
  }
  Add(stream.Push(text.substr(pos)), &all);
  Add(stream.Finish(), &all);
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t first = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const ToolCallSplit whole = vls::server::SplitToolCalls(text);

  if (whole.content.size() > text.size()) Fail("content longer than the text", text);
  for (const auto& call : whole.calls) {
    vls::server::ToolCall again;
    const std::string block = "{\"name\":\"n\",\"arguments\":" + call.arguments + "}";
    if (call.name.empty() || call.arguments.empty() || call.arguments.front() != '{' ||
        !vls::server::ParseToolCallBody(block, &again) || again.arguments != call.arguments) {
      Fail("a call whose arguments are not a compact object", text);
    }
  }

  if (Stream(text, {}) != whole) Fail("one delta differs from the whole text", text);
  const size_t cut = text.empty() ? 0 : (first * 2654435761u) % (text.size() + 1);
  if (Stream(text, {cut}) != whole) Fail("two deltas differ from the whole text", text);
  std::vector<size_t> cuts;
  const size_t step = first % 13 + 1;
  for (size_t pos = step; pos < text.size(); pos += step) cuts.push_back(pos);
  if (Stream(text, cuts) != whole) Fail("fixed-size deltas differ from the whole text", text);
  cuts.clear();
  for (size_t pos = 1; pos < text.size() && text.size() <= 4096; ++pos) cuts.push_back(pos);
  if (Stream(text, cuts) != whole) Fail("one-byte deltas differ from the whole text", text);
  return 0;
}
