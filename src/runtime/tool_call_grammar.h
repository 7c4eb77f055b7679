// Enforced tool calls (structured output's tool modes, structured_output.h) as a grammar over
// the reply text, in Qwen3's format: the chat template writes each call as
//
//   <tool_call>\n{"name": "<fn>", "arguments": <args>}\n</tool_call>
//
// (calls separated by "\n"), and server/tool_calls.cc parses exactly that back. <fn> is the
// function's name as a JSON string; <args> follows the function's "parameters" schema
// (grammar/json_schema.h, strict when the function says "strict": true; any JSON object when it
// has no parameters). Qwen3's "<tool_call>" and "</tool_call>" are added tokens that are not
// special, so the grammar writes them as text and the token mask allows the added tokens (and
// their spellings in ordinary tokens alike).
#ifndef VLSTACK_RUNTIME_TOOL_CALL_GRAMMAR_H_
#define VLSTACK_RUNTIME_TOOL_CALL_GRAMMAR_H_

#include <cstdint>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"
#include "runtime/structured_output.h"

namespace vls {

// The reply grammar for `so.tools` over `tools` (a list of {"type": "function", "function":
// {...}}, as StructuredOutputFromJson checked it):
//   kRequired: one or more calls, each of any of the functions, separated by "\n";
//   kNamed:    exactly one call of so.tool_name;
//   kStrict:   free text that does not contain "<tool_call>", then zero or more calls; when
//              so.kind asks for a reply format too, either that format or one or more calls.
// REQUIRES: so.tools != kFree. InvalidArgument names the tool whose schema fails to compile
// ("tools[1].function.parameters: unsupported keyword ...", param "tools[1].function.parameters")
// or a named function that is not in tools; the grammar is validated.
StatusOr<grammar::Grammar> ToolCallGrammar(const nlohmann::ordered_json& tools,
                                           const StructuredOutput& so,
                                           const grammar::GrammarLimits& limits);

// Copies every rule of `g` into `builder` (names kept unique) and returns the id of its root.
int32_t ImportGrammar(grammar::GrammarBuilder* builder, const grammar::Grammar& g);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_TOOL_CALL_GRAMMAR_H_
