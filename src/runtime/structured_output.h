// What a request asks its reply to follow (structured output, docs/structured_output.md): a JSON
// schema, any JSON object, a GBNF grammar or a regular expression, and how its tool calls are
// enforced. Every entry point (server, C ABI chat JSON, `run`, `batch`, Python) fills a
// StructuredOutput in its ChatRequest; ChatPipeline compiles it (cached by content) into the
// GenerationRequest's grammar, which the batch engine enforces with a token mask per row.
#ifndef VLSTACK_RUNTIME_STRUCTURED_OUTPUT_H_
#define VLSTACK_RUNTIME_STRUCTURED_OUTPUT_H_

#include <cstdint>
#include <string>

namespace vls {

struct StructuredOutput {
  enum class Kind : uint8_t {
    kNone,        // free text
    kJsonObject,  // any JSON object (OpenAI response_format json_object)
    kJsonSchema,  // `source` is the schema, as JSON text
    kGbnf,        // `source` is a GBNF grammar (llama.cpp's syntax, root rule "root")
    kRegex,       // `source` is a regular expression the whole reply matches
  };
  Kind kind = Kind::kNone;
  std::string source;
  // kJsonSchema: OpenAI's strict mode (objects without "additionalProperties" allow none;
  // grammar::JsonSchemaOptions::strict). OpenAI's response_format json_schema with
  // "strict": true sets it; llama-server's `json_schema` field leaves it false.
  bool strict = false;
  // The request field the format came from ("response_format", "json_schema", "grammar",
  // "regex", or a CLI flag such as "--json-schema"): the param of a compile error. Not part of
  // what the grammar is.
  std::string field;

  // Tool calls, over ChatRequest::tools (the functions' `parameters` schemas):
  enum class Tools : uint8_t {
    kFree,      // not enforced (tool_choice "auto" without strict tools, or "none")
    kStrict,    // "auto" with strict tools: text, then optional calls whose arguments follow
                // their function's schema
    kRequired,  // "required": one or more calls, each of a given function
    kNamed,     // a named function: exactly one call of `tool_name`
  };
  Tools tools = Tools::kFree;
  std::string tool_name;  // kNamed

  bool active() const { return kind != Kind::kNone || tools != Tools::kFree; }
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_STRUCTURED_OUTPUT_H_
