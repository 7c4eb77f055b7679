// The grammar layer's one intermediate form: a context-free grammar over Unicode code points,
// what every front end (GBNF, JSON Schema, regular expressions) compiles to and what the
// matcher (grammar/matcher.h) runs. Depends on base only (docs/structured_output.md).
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence
// of elements, each either a character class (a set of code points) or a reference to a rule.
// An empty alternative matches the empty string. Repetition, optionals and groups are desugared
// by the front ends into helper rules (x* is R ::= x R | ε, right-recursive), so the matcher
// only sees sequences and choices. Literal strings are sequences of one-code-point classes.
//
// Rules a valid grammar keeps (ValidateGrammar): every reference names a rule; the root
// exists; no rule is left-recursive, directly or through rules that can match empty (the
// matcher is a top-down pushdown automaton); the sizes stay under GrammarLimits.
#ifndef VLSTACK_GRAMMAR_GRAMMAR_H_
#define VLSTACK_GRAMMAR_GRAMMAR_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace vls::grammar {

// Inclusive code point range [lo, hi], lo <= hi <= 0x10FFFF.
struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
  bool operator==(const CodepointRange&) const = default;
};

// A set of code points: sorted, disjoint, non-adjacent ranges (Normalize makes it so).
// Surrogates (U+D800..U+DFFF) are never members: they cannot be written in UTF-8.
struct CharClass {
  std::vector<CodepointRange> ranges;
  bool operator==(const CharClass&) const = default;
};

// Sorts and merges the ranges, removes surrogates and anything past U+10FFFF.
void Normalize(CharClass* c);
// The complement within [0, 0x10FFFF] minus surrogates.
CharClass Complement(const CharClass& c);
bool Contains(const CharClass& c, uint32_t cp);

// Decodes the UTF-8 character at text[at]: returns its length (1 to 4) and sets *cp, or returns 0
// when the bytes there are not the shortest encoding of a character (truncated, stray
// continuation bytes, overlong forms, surrogates, past U+10FFFF). The front ends' one decoder.
int DecodeUtf8(std::string_view text, size_t at, uint32_t* cp);
// The value of a hex digit (0-9, a-f, A-F), or -1.
int HexValue(char c);

struct Element {
  enum class Kind : uint8_t { kChars, kRule };
  Kind kind = Kind::kChars;
  int32_t index = 0;  // into Grammar::classes (kChars) or Grammar::rules (kRule)
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;                    // unique within the grammar; for errors and printing
  std::vector<Sequence> alternatives;  // at least one; an empty Sequence matches ""
};

struct Grammar {
  std::vector<Rule> rules;
  std::vector<CharClass> classes;  // deduplicated by GrammarBuilder
  int32_t root = 0;
};

// Bounds every front end checks before and while it builds (named errors, never an abort).
// The defaults are the server's; docs/limits.md lists them.
struct GrammarLimits {
  size_t max_source_bytes = 256 * 1024;  // GBNF text, schema JSON text, regex pattern
  size_t max_rules = 20000;
  size_t max_elements = 200000;  // summed over every alternative of every rule
  int max_nesting = 64;          // parentheses, schema depth, regex groups
  int max_repeat = 1000;         // the largest m or n in x{m,n}, minItems, maxLength, ...
  size_t max_enum = 10000;       // members of one enum / alternatives of one rule
};

// Builds a grammar; classes are deduplicated, names made unique.
class GrammarBuilder {
 public:
  // Reserves a rule id with a name unique in this builder (a suffix "-N" is added when the name
  // is taken). Its alternatives are set later with SetAlternatives.
  int32_t AddRule(std::string_view name);
  // The rule id of an existing name, or -1.
  int32_t FindRule(std::string_view name) const;
  void SetAlternatives(int32_t rule, std::vector<Sequence> alternatives);
  Element Chars(CharClass c);  // normalises and deduplicates
  Element Char(uint32_t cp);
  Element Ref(int32_t rule) const { return Element{Element::Kind::kRule, rule}; }
  // The UTF-8 text as one element per code point (invalid UTF-8 bytes become U+FFFD).
  Sequence Literal(std::string_view utf8);
  // A fresh rule matching x*, x+, x? or x{min,max} (max < 0: unbounded), built from right
  // recursion and copies; the name is derived from `base`.
  int32_t Repeat(std::string_view base, const Sequence& x, int min, int max);

  size_t element_count() const;
  size_t rule_count() const { return grammar_.rules.size(); }
  // Hands the grammar over with `root` as its root.
  Grammar Build(int32_t root) &&;

 private:
  Grammar grammar_;
  std::unordered_map<std::string, int32_t> names_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, int32_t> class_ids_;
};

// Checks the rules above (names the rule at fault).
Status ValidateGrammar(const Grammar& g, const GrammarLimits& limits);

// The grammar in GBNF syntax, deterministic: ParseGbnf(PrintGbnf(g)) is an equivalent grammar.
// Used for the compiled-grammar cache key and for debugging.
std::string PrintGbnf(const Grammar& g);

}  // namespace vls::grammar

#endif  // VLSTACK_GRAMMAR_GRAMMAR_H_
