// JSON Schema as a grammar of the JSON texts that validate against it (docs/structured_output.md
// has the supported subset beside llama.cpp's and XGrammar's). A keyword outside the subset is
// refused with an error that names the keyword and its JSON pointer (e.g. `unsupported keyword
// "not" at /properties/a`), never dropped.
#ifndef VLSTACK_GRAMMAR_JSON_SCHEMA_H_
#define VLSTACK_GRAMMAR_JSON_SCHEMA_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace vls::grammar {

struct JsonSchemaOptions {
  // OpenAI's strict mode: objects without "additionalProperties" allow none (instead of any).
  bool strict = false;
};

// Adds a rule matching the JSON texts valid under `schema` (whitespace between tokens as the
// grammar allows it, bounded so a reply cannot run on in blanks) to `builder`; returns its id.
StatusOr<int32_t> AddJsonSchemaRule(GrammarBuilder* builder, const nlohmann::ordered_json& schema,
                                    std::string_view rule_name, const JsonSchemaOptions& options,
                                    const GrammarLimits& limits);

// A whole grammar for the schema; validated. The text form parses it under the untrusted-JSON
// rules first (size and nesting bounds).
StatusOr<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema,
                                      const JsonSchemaOptions& options,
                                      const GrammarLimits& limits);
StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                      const JsonSchemaOptions& options,
                                      const GrammarLimits& limits);

// Any JSON object (response_format {"type": "json_object"}).
Grammar AnyJsonObjectGrammar();

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_JSON_SCHEMA_H_
