// The request fields that ask for structured output (docs/structured_output.md), read into a
// StructuredOutput. One reader for every entry point that takes a chat request as JSON: the
// server's /v1/chat/completions and /v1/completions bodies, the C ABI's chat JSON and `batch`
// lines (through ChatRequestFromJson).
//
//   "response_format": {"type": "text"}                       nothing (free text)
//                    | {"type": "json_object"}                any JSON object
//                    | {"type": "json_object", "schema": {...}}   llama-server's form: the schema
//                    | {"type": "json_schema", "json_schema": {"name": string?, "schema": {...},
//                       "strict": bool?, "description": string?}}   OpenAI's (strict as given)
//   "json_schema": {...}      llama-server / vLLM: a JSON schema (not strict)
//   "grammar": string         llama-server: a GBNF grammar (root rule "root")
//   "regex": string           vLLM: a regular expression the whole reply matches
//   "tools": [{"type": "function", "function": {"name": string, "parameters": {...}?,
//              "description": string?, "strict": bool?}}]
//   "tool_choice": "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
//
// At most one of response_format (other than "text"), json_schema, grammar and regex; two are
// refused naming both. tool_choice absent means "auto" when tools are given; "auto" enforces the
// calls (Tools::kStrict) when any tool has "strict": true; "required" and a named function
// always do, and then refuse a reply format beside them (the reply is tool calls only).
// tool_choice without tools, or naming a function not in tools, is refused.
//
// Fields absent or null are the same. Errors are InvalidArgument with the message starting with
// the quoted field and Status::param the field ("response_format.json_schema.schema",
// "tools[2].function.strict", "tool_choice"). Only the syntax is read here: the schema, grammar
// and regex are compiled (and refused by construct) by ChatPipeline::Prepare.
#ifndef VLSTACK_RUNTIME_STRUCTURED_OUTPUT_JSON_H_
#define VLSTACK_RUNTIME_STRUCTURED_OUTPUT_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/structured_output.h"

namespace vls {

// Reads the fields above from `request` (an object; other fields are ignored) into *out.
Status StructuredOutputFromJson(const nlohmann::ordered_json& request, StructuredOutput* out);

// Stop strings cut the text wherever they match, so beside a reply format (json_object,
// json_schema, grammar, regex) they could end a reply with finish_reason "stop" that does not
// parse, and such a reply must always be valid: the pair is refused (param "stop"). Stop token ids
// stay allowed (the engine takes them only where the grammar may end), and so do stop strings
// beside enforced tool calls (a match ends the reply; the calls complete before it are returned).
Status CheckStopWithReplyFormat(const StructuredOutput& so, const std::vector<std::string>& stop);

// The request fields StructuredOutputFromJson reads ("response_format", "json_schema",
// "grammar", "regex", "tools", "tool_choice"), for readers that refuse unknown fields.
inline constexpr const char* kStructuredOutputFields[] = {
    "response_format", "json_schema", "grammar", "regex", "tools", "tool_choice"};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_STRUCTURED_OUTPUT_JSON_H_
