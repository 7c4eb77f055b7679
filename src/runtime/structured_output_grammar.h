// Structured output compiled (docs/structured_output.md): a request's StructuredOutput (and its
// tools) -> a grammar (JSON Schema, any JSON object, GBNF, regex, enforced tool calls) -> a
// grammar::CompiledGrammar over the model's vocabulary, through a cache keyed by content so that
// requests repeating a schema compile it once and share its token-mask cache.
#ifndef VLSTACK_RUNTIME_STRUCTURED_OUTPUT_GRAMMAR_H_
#define VLSTACK_RUNTIME_STRUCTURED_OUTPUT_GRAMMAR_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "runtime/structured_output.h"

namespace vls {

// The grammar of so.kind's reply format alone (REQUIRES: so.kind != kNone).
StatusOr<grammar::Grammar> ReplyFormatGrammar(const StructuredOutput& so,
                                              const grammar::GrammarLimits& limits);

// The whole reply's grammar: the tool-call grammar (tool_call_grammar.h) when so.tools is
// enforced, else the reply format's. REQUIRES: so.active().
// Errors are InvalidArgument (Internal stays Internal) naming what is wrong, with the front end's
// words (e.g. `unsupported keyword "not" at /properties/a`) after the request field they came
// from, which is also the param: so.field ("response_format", "json_schema", "grammar", "regex",
// a CLI flag), or "tools[i].function.parameters".
StatusOr<grammar::Grammar> StructuredOutputGrammar(const StructuredOutput& so,
                                                   const nlohmann::ordered_json& tools,
                                                   const grammar::GrammarLimits& limits);

// Compiled grammars by content: the key is the kind, strictness and source, the tool mode and
// name, and the tools' JSON (compact) when the tool calls are enforced. Least recently used
// entries go first beyond `capacity`. Failed compiles are not kept. Thread-safe; two threads
// missing the same key at once may both compile it (one result is kept).
class GrammarCache {
 public:
  static constexpr size_t kDefaultCapacity = 64;

  GrammarCache(std::shared_ptr<const grammar::TokenVocab> vocab, grammar::GrammarLimits limits,
               size_t capacity = kDefaultCapacity);

  // The compiled grammar of `so` over `tools`. REQUIRES: so.active().
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> Get(
      const StructuredOutput& so, const nlohmann::ordered_json& tools);

  uint64_t hits() const;
  uint64_t misses() const;  // compiles attempted (failures included)
  size_t size() const;
  const grammar::TokenVocab& vocab() const { return *vocab_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>;

  std::shared_ptr<const grammar::TokenVocab> vocab_;
  grammar::GrammarLimits limits_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_STRUCTURED_OUTPUT_GRAMMAR_H_
