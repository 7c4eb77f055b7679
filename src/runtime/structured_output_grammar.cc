#include "runtime/structured_output_grammar.h"

#include <string>
#include <utility>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "runtime/tool_call_grammar.h"

namespace vls {
namespace {

using Kind = StructuredOutput::Kind;

// The request field a format came from, for errors.
std::string FormatField(const StructuredOutput& so) {
  if (!so.field.empty()) return so.field;
  switch (so.kind) {
    case Kind::kGbnf: return "grammar";
    case Kind::kRegex: return "regex";
    default: return "response_format";
  }
}

Status Named(const Status& s, const std::string& field) {
  if (s.ok()) return s;
  const StatusCode code =
      s.code() == StatusCode::kInternal ? StatusCode::kInternal : StatusCode::kInvalidArgument;
  // The front ends may already name their input the same way ("regex: ...").
  const std::string prefix = field + ": ";
  const bool named = s.message().rfind(prefix, 0) == 0;
  return Status(code, named ? s.message() : prefix + s.message()).WithParam(field);
}

std::string Key(const StructuredOutput& so, const nlohmann::ordered_json& tools) {
  std::string key;
  key += static_cast<char>('0' + static_cast<int>(so.kind));
  key += so.strict ? 'S' : 's';
  key += static_cast<char>('0' + static_cast<int>(so.tools));
  key += std::to_string(so.source.size());
  key += ':';
  key += so.source;
  if (so.tools != StructuredOutput::Tools::kFree) {
    key += std::to_string(so.tool_name.size());
    key += ':';
    key += so.tool_name;
    key += tools.dump();
  }
  return key;
}

}  // namespace

StatusOr<grammar::Grammar> ReplyFormatGrammar(const StructuredOutput& so,
                                              const grammar::GrammarLimits& limits) {
  StatusOr<grammar::Grammar> g = Internal("no reply format");
  switch (so.kind) {
    case Kind::kNone: break;
    case Kind::kJsonObject: return grammar::AnyJsonObjectGrammar();
    case Kind::kJsonSchema: {
      grammar::JsonSchemaOptions options;
      options.strict = so.strict;
      g = grammar::JsonSchemaToGrammar(std::string_view(so.source), options, limits);
      break;
    }
    case Kind::kGbnf: g = grammar::ParseGbnf(so.source, limits); break;
    case Kind::kRegex: g = grammar::RegexToGrammar(so.source, limits); break;
  }
  if (!g.ok()) return Named(g.status(), FormatField(so));
  return g;
}

StatusOr<grammar::Grammar> StructuredOutputGrammar(const StructuredOutput& so,
                                                   const nlohmann::ordered_json& tools,
                                                   const grammar::GrammarLimits& limits) {
  if (so.tools != StructuredOutput::Tools::kFree) return ToolCallGrammar(tools, so, limits);
  return ReplyFormatGrammar(so, limits);
}

GrammarCache::GrammarCache(std::shared_ptr<const grammar::TokenVocab> vocab,
                           grammar::GrammarLimits limits, size_t capacity)
    : vocab_(std::move(vocab)), limits_(limits), capacity_(capacity == 0 ? 1 : capacity) {}

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> GrammarCache::Get(
    const StructuredOutput& so, const nlohmann::ordered_json& tools) {
  std::string key = Key(so, tools);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
  }
  VLS_ASSIGN_OR_RETURN(grammar::Grammar g, StructuredOutputGrammar(so, tools, limits_));
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
      grammar::CompiledGrammar::Compile(g, vocab_, limits_);
  if (!compiled.ok()) {
    const std::string field = so.tools != StructuredOutput::Tools::kFree ? "tools"
                              : so.field.empty()                         ? "response_format"
                                                                         : so.field;
    return Named(compiled.status(), field);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(std::move(key), *compiled);
  index_.emplace(lru_.front().first, lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return *compiled;
}

uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
uint64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace vls
