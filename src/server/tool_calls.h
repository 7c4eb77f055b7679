// Tool calls in the text a model writes (Qwen3 / Hermes format), for the OpenAI `tool_calls`
// field of a chat completion:
//
//   Let me look that up.
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
//
// A block is the text from a `<tool_call>` tag to the first `</tool_call>` after it (tags
// included). It becomes a call when all of these hold, and otherwise stays in the content as
// text, byte for byte:
//   * the block is at most kMaxToolCallBlockBytes long;
//   * its body (between the tags, whitespace around it ignored) is one JSON object under the
//     rules of io/untrusted_json.h (bounded nesting, no repeated key, valid UTF-8);
//   * "name" is a non-empty string;
//   * "arguments" is an object, a string holding a JSON object (OpenAI's own encoding), or
//     absent (= {}). Other keys are ignored.
// A `<tool_call>` with no `</tool_call>` after it stays as text up to the end. Text outside blocks
// is content. Nothing here throws or asserts on the text.
//
// SplitToolCalls works on a whole reply; ToolCallStream gives the same result over text deltas
// for any way the text is cut into deltas, releasing content as early as that allows.
#ifndef VLSTACK_SERVER_TOOL_CALLS_H_
#define VLSTACK_SERVER_TOOL_CALLS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vls::server {

inline constexpr std::string_view kToolCallOpenTag = "<tool_call>";
inline constexpr std::string_view kToolCallCloseTag = "</tool_call>";
// Longest block (both tags included) that can become a call; a longer one is released as text,
// so a stream never holds more than about this much.
inline constexpr size_t kMaxToolCallBlockBytes = size_t{1} << 20;

struct ToolCall {
  std::string name;
  // The arguments object as compact JSON text, keys in the order the model wrote them (OpenAI
  // sends `arguments` as a JSON string).
  std::string arguments;

  bool operator==(const ToolCall&) const = default;
};

struct ToolCallSplit {
  std::string content;          // text outside valid blocks, in order
  std::vector<ToolCall> calls;  // valid blocks, in order

  bool operator==(const ToolCallSplit&) const = default;
};

// Splits a whole reply into content and calls (rules above).
ToolCallSplit SplitToolCalls(std::string_view text);

// Parses one block body (the text between the tags) into a call; false when it is not a valid
// call (rules above). Exposed for the tests and the fuzz target.
bool ParseToolCallBody(std::string_view body, ToolCall* call);

// The streaming form of SplitToolCalls. Feed text deltas in order with Push and end with Finish;
// each returns what became certain: content that can no longer be part of a `<tool_call>` tag
// (only a possible prefix of the tag is held back), and calls whose `</tool_call>` has arrived.
// Concatenating the content of every result, and the calls, gives exactly SplitToolCalls of the
// concatenated deltas. Holds at most about kMaxToolCallBlockBytes. Not thread-safe: one stream
// per reply.
class ToolCallStream {
 public:
  ToolCallSplit Push(std::string_view delta);
  // End of the text: releases whatever is held (an unfinished block as text). The stream is then
  // empty and could start a new reply.
  ToolCallSplit Finish();

 private:
  enum class State {
    kText,      // outside a block; held_ is a possible prefix of the open tag
    kBlock,     // inside a block; held_ is the block so far, from its open tag
    kOversize,  // inside a block too long to be a call, already released; held_ is a possible
                // prefix of the close tag
  };
  void Run(ToolCallSplit* out);

  State state_ = State::kText;
  std::string held_;
  // kBlock: where the search for the close tag resumes in held_.
  size_t search_from_ = 0;
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_TOOL_CALLS_H_
