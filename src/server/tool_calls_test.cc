#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace vls::server {

// For gtest's messages (found by argument-dependent lookup).
void PrintTo(const ToolCallSplit& s, std::ostream* os) {
  *os << "content=\"" << s.content << "\" calls=[";
  for (const auto& c : s.calls) *os << c.name << ":" << c.arguments << " ";
  *os << "]";
}

namespace {

// Streams `deltas` and joins every result.
ToolCallSplit StreamAll(const std::vector<std::string_view>& deltas) {
  ToolCallStream stream;
  ToolCallSplit all;
  auto add = [&all](ToolCallSplit part) {
    all.content += part.content;
    for (auto& c : part.calls) all.calls.push_back(std::move(c));
  };
  for (const std::string_view d : deltas) add(stream.Push(d));
  add(stream.Finish());
  return all;
}

const ToolCall Call(std::string name, std::string arguments) {
  return ToolCall{std::move(name), std::move(arguments)};
}

TEST(ToolCallsTest, SplitsOneQwenBlock) {
  const ToolCallSplit s = SplitToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": [1, 2]}}\n</tool_call>");
  EXPECT_EQ(s.content, "Let me check.\n");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0], Call("get_weather", R"({"city":"Paris","days":[1,2]})"));
}

TEST(ToolCallsTest, SeveralBlocksWithTextBetween) {
  const ToolCallSplit s = SplitToolCalls(
      "A<tool_call>{\"name\":\"f\",\"arguments\":{\"z\":1,\"a\":2}}</tool_call>B\n"
      "<tool_call>  \t{\"name\":\"g\"}\r\n</tool_call><tool_call>{\"name\":\"h\",\"arguments\":{}}"
      "</tool_call>C");
  EXPECT_EQ(s.content, "AB\nC");
  // Arguments keep the model's key order.
  EXPECT_EQ(s.calls, (std::vector<ToolCall>{Call("f", R"({"z":1,"a":2})"), Call("g", "{}"),
                                            Call("h", "{}")}));
}

TEST(ToolCallsTest, ArgumentsAsAJsonString) {
  const ToolCallSplit s = SplitToolCalls(
      R"(<tool_call>{"name": "f", "arguments": "{\"q\": \"x y\", \"n\": [1, {\"k\": null}]}"})"
      "</tool_call>");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.calls, std::vector<ToolCall>{Call("f", R"({"q":"x y","n":[1,{"k":null}]})")});
}

TEST(ToolCallsTest, Unicode) {
  const ToolCallSplit s = SplitToolCalls(
      "Température ☀ <tool_call>{\"name\": \"météo\", \"arguments\": {\"ville\": \"Zürich 🌍\", "
      "\"e\": \"\\u00e9\\ud83c\\udf0d\"}}</tool_call>");
  EXPECT_EQ(s.content, "Température ☀ ");
  EXPECT_EQ(s.calls, std::vector<ToolCall>{Call("météo", "{\"ville\":\"Zürich 🌍\",\"e\":\"é🌍\"}")});
}

TEST(ToolCallsTest, InvalidBlocksStayAsText) {
  const std::vector<std::string> invalid = {
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}</tool_call>",  // cut JSON
      "<tool_call>[\"f\"]</tool_call>",                                      // not an object
      "<tool_call>{\"arguments\": {}}</tool_call>",                          // no name
      "<tool_call>{\"name\": 3}</tool_call>",                                // name not a string
      "<tool_call>{\"name\": \"\"}</tool_call>",                             // empty name
      "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": null}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>",  // string, no object
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{oops\"}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"name\": \"g\"}</tool_call>",  // repeated key
      "<tool_call>{\"name\": \"f\"} trailing</tool_call>",
      "<tool_call>{\"name\": \"\xff\"}</tool_call>",  // invalid UTF-8
      "<tool_call></tool_call>",
      "<tool_call>" + std::string(100, '[') + std::string(100, ']') + "</tool_call>",
  };
  for (const std::string& block : invalid) {
    const std::string text = "x " + block + " y<tool_call>{\"name\":\"ok\"}</tool_call>";
    const ToolCallSplit s = SplitToolCalls(text);
    EXPECT_EQ(s.content, "x " + block + " y") << block;
    EXPECT_EQ(s.calls, std::vector<ToolCall>{Call("ok", "{}")}) << block;
    EXPECT_EQ(StreamAll({text}), s);
  }
}

TEST(ToolCallsTest, UnterminatedBlockStaysAsText) {
  const std::string text = "Sure: <tool_call>\n{\"name\": \"f\", \"arguments\": {";
  EXPECT_EQ(SplitToolCalls(text), (ToolCallSplit{text, {}}));
  ToolCallStream stream;
  EXPECT_EQ(stream.Push(text).content, "Sure: ");  // the block is held
  EXPECT_EQ(stream.Push("\"a\": 1}}\n</tool_").content, "");
  EXPECT_EQ(stream.Finish().content, text.substr(6) + "\"a\": 1}}\n</tool_");
}

TEST(ToolCallsTest, StreamHoldsOnlyATagPrefix) {
  ToolCallStream stream;
  EXPECT_EQ(stream.Push("Hello <tool").content, "Hello ");
  EXPECT_EQ(stream.Push("s are").content, "<tools are");  // not a tag after all
  EXPECT_EQ(stream.Push(" <").content, " ");
  EXPECT_EQ(stream.Push("<").content, "<");  // "<<": only the last '<' can start a tag
  EXPECT_EQ(stream.Push("tool_c").content, "");
  EXPECT_EQ(stream.Finish(), (ToolCallSplit{"<tool_c", {}}));  // a partial tag at the end

  ToolCallStream again;
  EXPECT_EQ(again.Push("<tool_call>{\"name\":\"f\"}").content, "");
  ToolCallSplit closed = again.Push("</tool_call> after");
  EXPECT_EQ(closed, (ToolCallSplit{" after", {Call("f", "{}")}}));
  EXPECT_EQ(again.Finish(), ToolCallSplit{});
}

// The property: any cut of the text into deltas gives SplitToolCalls of the whole text.
void CheckEveryCut(const std::string& text, const ToolCallSplit& expected) {
  const std::string_view t = text;
  ASSERT_EQ(SplitToolCalls(t), expected) << text;
  for (size_t i = 0; i <= t.size(); ++i) {
    for (size_t j = i; j <= t.size(); ++j) {
      ASSERT_EQ(StreamAll({t.substr(0, i), t.substr(i, j - i), t.substr(j)}), expected)
          << "cut at " << i << ", " << j << ": " << text;
    }
  }
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::string_view> deltas;
    for (size_t pos = 0; pos < t.size();) {
      const size_t n = std::min<size_t>(t.size() - pos, rng() % (trial % 3 == 0 ? 3 : 16));
      deltas.push_back(t.substr(pos, n));  // empty deltas too
      pos += n;
    }
    ASSERT_EQ(StreamAll(deltas), expected) << "trial " << trial << ": " << text;
  }
}

TEST(ToolCallsTest, StreamingEqualsWholeForEveryCut) {
  CheckEveryCut(
      "Hi <tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call> mid "
      "<tool_call>{\"name\":\"b\"}</tool_call>tail",
      {"Hi  mid tail", {Call("a", R"({"x":1})"), Call("b", "{}")}});
  CheckEveryCut(
      "<tool_call>{bad}</tool_call><tool_call>{\"name\":\"c\",\"arguments\":\"{\\\"k\\\":[1]}\"}"
      "</tool_call>",
      {"<tool_call>{bad}</tool_call>", {Call("c", R"({"k":[1]})")}});
  CheckEveryCut(
      "<tool <tool_call <tool_call>{\"name\":\"x\",\"arguments\":{\"s\":\"</tool_\"}} "
      "</tool_call></tool_call>x<",
      {"<tool <tool_call </tool_call>x<", {Call("x", R"({"s":"</tool_"})")}});
  CheckEveryCut("a<<tool_call>><</tool_call>><tool_call>{\"name\":\"z\"}",
                {"a<<tool_call>><</tool_call>><tool_call>{\"name\":\"z\"}", {}});
  CheckEveryCut("é<tool_call>{\"name\":\"météo\",\"arguments\":{\"v\":\"🌍\"}}</tool_call>ü<tool_c",
                {"éü<tool_c", {Call("météo", "{\"v\":\"🌍\"}")}});
  CheckEveryCut("no tags at all, just < and </ and <tool_call",
                {"no tags at all, just < and </ and <tool_call", {}});
}

// A block of exactly `size` bytes (both tags included) holding a valid call padded with spaces.
std::string PaddedBlock(size_t size) {
  const std::string head = "<tool_call>{\"name\":\"big\"}";
  return head + std::string(size - head.size() - kToolCallCloseTag.size(), ' ') +
         std::string(kToolCallCloseTag);
}

TEST(ToolCallsTest, BlockSizeLimit) {
  const std::string at_limit = "a" + PaddedBlock(kMaxToolCallBlockBytes) + "b";
  const std::string over = "a" + PaddedBlock(kMaxToolCallBlockBytes + 1) + "b";
  EXPECT_EQ(SplitToolCalls(at_limit), (ToolCallSplit{"ab", {Call("big", "{}")}}));
  EXPECT_EQ(SplitToolCalls(over), (ToolCallSplit{over, {}}));
  for (const size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, size_t{1} << 22}) {
    for (const std::string* text : {&at_limit, &over}) {
      std::vector<std::string_view> deltas;
      for (size_t pos = 0; pos < text->size(); pos += chunk) {
        deltas.push_back(std::string_view(*text).substr(pos, chunk));
      }
      EXPECT_EQ(StreamAll(deltas), SplitToolCalls(*text)) << chunk;
    }
  }
}

TEST(ToolCallsTest, OversizedBlockIsReleasedBeforeItCloses) {
  const std::string big(3 * kMaxToolCallBlockBytes, 'x');
  ToolCallStream stream;
  EXPECT_EQ(stream.Push("<tool_call>").content, "");
  size_t released = 0;
  for (size_t pos = 0; pos < big.size(); pos += 65536) {
    released += stream.Push(std::string_view(big).substr(pos, 65536)).content.size();
  }
  // Everything but the last bytes past the limit went out already: the stream does not hold it.
  EXPECT_GE(released, big.size() + kToolCallOpenTag.size() - 65536);
  // After the oversized block closes, blocks are parsed again.
  ToolCallSplit rest = stream.Push("</tool_c");
  released += rest.content.size();
  rest = stream.Push("all>z<tool_call>{\"name\":\"n\"}</tool_call>");
  EXPECT_EQ(rest.calls, std::vector<ToolCall>{Call("n", "{}")});
  released += rest.content.size();
  EXPECT_EQ(released, kToolCallOpenTag.size() + big.size() + kToolCallCloseTag.size() + 1);
  EXPECT_EQ(stream.Finish(), ToolCallSplit{});
}

}  // namespace
}  // namespace vls::server
