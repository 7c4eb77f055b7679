// Internal to the grammar layer: the JSON Schema compiler behind json_schema.h, split over
// json_schema.cc (keywords, $ref, allOf/anyOf, dispatch), json_schema_types.cc (objects,
// arrays, strings, numbers, enum/const) and json_schema_json.cc (the JSON lexical rules:
// bounded whitespace, strings, numbers, any value, integer ranges). Not a public header.
#ifndef VLSTACK_GRAMMAR_JSON_SCHEMA_INTERNAL_H_
#define VLSTACK_GRAMMAR_JSON_SCHEMA_INTERNAL_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace vls::grammar::json_schema_internal {

using Json = nlohmann::ordered_json;

// A rule id that matches nothing (the schema `false`, an items schema that admits no value).
inline constexpr int32_t kNone = -1;

// Whitespace between JSON tokens: "" | " " | "\n" [ \t]{0,kMaxIndent}.
inline constexpr int kMaxIndent = 20;
// Digits of the integer part of a number (and of an integer), of a fraction, of an exponent.
inline constexpr int kMaxIntDigits = 20;
inline constexpr int kMaxFracDigits = 20;
inline constexpr int kMaxExpDigits = 3;

// title, description, examples, default, $schema, $id, $comment, deprecated, readOnly,
// writeOnly: ignored wherever they appear.
bool IsAnnotationKeyword(std::string_view keyword);

// "/a/b" with ~ and / escaped as ~0 and ~1.
std::string PointerChild(const std::string& path, std::string_view key);
// `at /path` ("at /" for the root).
std::string At(const std::string& path);

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder* builder, const Json& root, std::string prefix,
                 const JsonSchemaOptions& options, const GrammarLimits& limits)
      : b_(builder), root_(root), prefix_(std::move(prefix)), options_(options), limits_(limits) {}

  // A rule for the values valid under `schema` (found at `path`), or kNone.
  StatusOr<int32_t> Visit(const Json& schema, const std::string& path, int depth);

  // --- JSON lexical rules (json_schema_json.cc), created once per compiler. ---
  int32_t Ws();
  int32_t AnyValue();
  int32_t AnyObject();
  int32_t AnyArray();
  int32_t AnyString();
  int32_t StringChar();                    // one character of a JSON string, raw or escaped
  int32_t RawStringChars(CharClass* raw);  // the class of raw characters (returns its element id)
  int32_t AnyNumber();
  int32_t AnyInteger();
  // Integers in [lo, hi] (nullopt: unbounded on that side), written without exponent; kNone
  // when empty.
  int32_t IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi);
  // Numbers (not only integers) between integer bounds (each inclusive or exclusive), written
  // without exponent; a non-integer's fraction ends in a non-zero digit.
  int32_t NumberRange(std::optional<int64_t> lo, bool lo_exclusive, std::optional<int64_t> hi,
                      bool hi_exclusive);
  // Fraction digit strings (one or more digits) whose value is >= (greater) or <= the fraction
  // `digits` (which ends in a non-zero digit); strictly so when `strict`.
  int32_t FracCompare(const std::string& digits, bool greater, bool strict);
  // The JSON text of `v` exactly (keys in its order), whitespace allowed between tokens.
  Sequence ValueLiteral(const Json& v);
  // A JSON string that is none of `names` as written (the keys of additionalProperties).
  int32_t KeyNotIn(const std::vector<std::string>& names);

  int32_t NewRule(std::string_view name, std::vector<Sequence> alternatives);
  Sequence Lit(std::string_view s) { return b_->Literal(s); }
  Element Ref(int32_t rule) const { return b_->Ref(rule); }
  GrammarBuilder* builder() { return b_; }
  const GrammarLimits& limits() const { return limits_; }

 private:
  // --- json_schema_types.cc ---
  StatusOr<int32_t> ObjectRule(const Json& s, const std::string& path, int depth);
  StatusOr<int32_t> ArrayRule(const Json& s, const std::string& path, int depth);
  StatusOr<int32_t> StringRule(const Json& s, const std::string& path);
  StatusOr<int32_t> NumberRule(const Json& s, const std::string& path, bool integer);
  StatusOr<int32_t> EnumRule(const Json& s, const std::string& path);
  StatusOr<int32_t> FormatRule(const std::string& format, const std::string& path);

  // --- json_schema.cc ---
  Status CheckKeywords(const Json& s, const std::string& path) const;
  StatusOr<int32_t> RefRule(const Json& s, const std::string& path, int depth);
  StatusOr<const Json*> Resolve(const std::string& ref, const std::string& path) const;
  // allOf-style merge of two schemas where it is trivial; an error naming the keyword else.
  StatusOr<Json> Merge(const Json& a, const Json& b, const std::string& path, int depth) const;
  StatusOr<Json> Inline(const Json& s, const std::string& path) const;
  Status CheckSize() const;

  GrammarBuilder* b_;
  const Json& root_;
  std::string prefix_;
  JsonSchemaOptions options_;
  GrammarLimits limits_;
  std::map<std::string, int32_t> refs_;     // JSON pointer -> rule
  std::map<std::string, int32_t> formats_;  // format -> rule
  std::map<std::string, int32_t> cache_;    // named lexical rules
  int visits_ = 0;
};

}  // namespace vls::grammar::json_schema_internal

#endif  // VLSTACK_GRAMMAR_JSON_SCHEMA_INTERNAL_H_
