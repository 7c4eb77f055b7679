// ValidateGrammar and PrintGbnf (grammar.h).
//
// Every check is linear in the grammar's size (a hostile grammar may have max_rules rules and
// max_elements elements): the rules that can match empty and the rules that can finish are
// found with a worklist, not by iterating to a fixed point, and the left-corner graph is searched
// with an explicit stack, never by recursion.
#include "grammar/grammar_check.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace vls::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;
// Rules named in a left-recursion error before "...".
constexpr size_t kMaxCycleNames = 16;

std::string Quoted(const Grammar& g, size_t rule) { return "'" + g.rules[rule].name + "'"; }

bool ClassIsNormal(const CharClass& c) {
  for (size_t i = 0; i < c.ranges.size(); ++i) {
    const CodepointRange& r = c.ranges[i];
    if (r.lo > r.hi || r.hi > kMaxCodepoint) return false;
    if (r.lo <= kSurrogateHi && r.hi >= kSurrogateLo) return false;
    if (i > 0 && r.lo <= c.ranges[i - 1].hi + 1) return false;
  }
  return true;
}

// Indices in range, at least one alternative per rule, and the sizes of GrammarLimits.
Status CheckShape(const Grammar& g, const GrammarLimits& limits, int32_t* fault) {
  if (g.rules.empty()) return InvalidArgument("grammar has no rules");
  if (g.rules.size() > limits.max_rules) {
    return InvalidArgument("grammar has " + std::to_string(g.rules.size()) +
                           " rules, over the limit of " + std::to_string(limits.max_rules) +
                           " (GrammarLimits::max_rules)");
  }
  if (g.root < 0 || static_cast<size_t>(g.root) >= g.rules.size()) {
    return InvalidArgument("grammar has no root rule (root index " + std::to_string(g.root) +
                           " of " + std::to_string(g.rules.size()) + " rules)");
  }
  for (size_t c = 0; c < g.classes.size(); ++c) {
    if (!ClassIsNormal(g.classes[c])) {
      return InvalidArgument("character class " + std::to_string(c) +
                             " is not normalised (sorted, disjoint ranges of code points up to "
                             "U+10FFFF without surrogates)");
    }
  }
  size_t elements = 0;
  for (size_t r = 0; r < g.rules.size(); ++r) {
    const Rule& rule = g.rules[r];
    *fault = static_cast<int32_t>(r);
    if (rule.alternatives.empty()) {
      return InvalidArgument("rule " + Quoted(g, r) + " has no alternatives");
    }
    if (rule.alternatives.size() > limits.max_enum) {
      return InvalidArgument("rule " + Quoted(g, r) + " has " +
                             std::to_string(rule.alternatives.size()) +
                             " alternatives, over the limit of " + std::to_string(limits.max_enum) +
                             " (GrammarLimits::max_enum)");
    }
    for (const Sequence& seq : rule.alternatives) {
      elements += seq.size();
      for (const Element& e : seq) {
        const size_t bound = e.kind == Element::Kind::kRule ? g.rules.size() : g.classes.size();
        if (e.index < 0 || static_cast<size_t>(e.index) >= bound) {
          return InvalidArgument("rule " + Quoted(g, r) + " refers to " +
                                 (e.kind == Element::Kind::kRule ? "rule " : "character class ") +
                                 std::to_string(e.index) + ", which does not exist");
        }
      }
    }
    if (elements > limits.max_elements) {
      *fault = -1;
      return InvalidArgument("grammar has more than " + std::to_string(limits.max_elements) +
                             " elements (GrammarLimits::max_elements)");
    }
  }
  *fault = -1;
  return Status::Ok();
}

// For each rule, whether it derives a string made only of what `terminal` accepts: with
// terminals_count = false, whether it can match the empty string; with true, whether it can
// derive any finite string at all. Linear: each alternative counts the references it still
// waits for, and a rule found to qualify decrements the alternatives that refer to it.
std::vector<uint8_t> Derives(const Grammar& g, bool terminals_count) {
  const size_t n = g.rules.size();
  std::vector<uint8_t> yes(n, 0);
  std::vector<int32_t> owner;   // [alternatives] the rule of each alternative
  std::vector<size_t> pending;  // [alternatives] references not yet known to qualify
  std::vector<size_t> occ_start(n + 1, 0);
  for (const Rule& rule : g.rules) {
    for (const Sequence& seq : rule.alternatives) {
      for (const Element& e : seq) {
        if (e.kind == Element::Kind::kRule) ++occ_start[static_cast<size_t>(e.index) + 1];
      }
    }
  }
  for (size_t r = 0; r < n; ++r) occ_start[r + 1] += occ_start[r];
  std::vector<size_t> occ(occ_start[n]);  // alternatives referring to each rule, CSR
  std::vector<size_t> fill(occ_start.begin(), occ_start.end() - 1);
  std::vector<int32_t> queue;
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& seq : g.rules[r].alternatives) {
      const size_t alt = owner.size();
      owner.push_back(static_cast<int32_t>(r));
      size_t refs = 0;
      bool blocked = false;
      for (const Element& e : seq) {
        if (e.kind == Element::Kind::kRule) {
          ++refs;
          occ[fill[static_cast<size_t>(e.index)]++] = alt;
        } else if (!terminals_count) {
          blocked = true;
        }
      }
      pending.push_back(blocked ? SIZE_MAX : refs);
      if (!blocked && refs == 0 && yes[r] == 0) {
        yes[r] = 1;
        queue.push_back(static_cast<int32_t>(r));
      }
    }
  }
  while (!queue.empty()) {
    const auto r = static_cast<size_t>(queue.back());
    queue.pop_back();
    for (size_t k = occ_start[r]; k < occ_start[r + 1]; ++k) {
      const size_t alt = occ[k];
      if (pending[alt] == SIZE_MAX || pending[alt] == 0) continue;
      if (--pending[alt] == 0) {
        const auto o = static_cast<size_t>(owner[alt]);
        if (yes[o] == 0) {
          yes[o] = 1;
          queue.push_back(owner[alt]);
        }
      }
    }
  }
  return yes;
}

// Left recursion: a cycle in the graph A -> B where B appears in an alternative of A after
// elements that can all match empty.
Status CheckLeftRecursion(const Grammar& g, const std::vector<uint8_t>& nullable, int32_t* fault) {
  const size_t n = g.rules.size();
  std::vector<size_t> start(n + 1, 0);
  std::vector<int32_t> edges;
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& seq : g.rules[r].alternatives) {
      for (const Element& e : seq) {
        if (e.kind != Element::Kind::kRule) break;
        edges.push_back(e.index);
        if (nullable[static_cast<size_t>(e.index)] == 0) break;
      }
    }
    start[r + 1] = edges.size();
  }
  // Iterative depth-first search; colour 1 = on the current path, 2 = done.
  std::vector<uint8_t> colour(n, 0);
  std::vector<std::pair<size_t, size_t>> stack;  // (rule, next edge)
  for (size_t s = 0; s < n; ++s) {
    if (colour[s] != 0) continue;
    stack.emplace_back(s, start[s]);
    colour[s] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == start[r + 1]) {
        colour[r] = 2;
        stack.pop_back();
        continue;
      }
      const auto to = static_cast<size_t>(edges[next++]);
      if (colour[to] == 0) {
        colour[to] = 1;
        stack.emplace_back(to, start[to]);
      } else if (colour[to] == 1) {
        size_t first = stack.size() - 1;
        while (stack[first].first != to) --first;
        std::string path;
        for (size_t k = first; k < stack.size(); ++k) {
          if (k - first == kMaxCycleNames) {
            path += "... -> ";
            break;
          }
          path += g.rules[stack[k].first].name + " -> ";
        }
        path += g.rules[to].name;
        *fault = static_cast<int32_t>(to);
        return InvalidArgument("rule " + Quoted(g, to) + " is left-recursive (" + path +
                               ", through rules that can match empty): the matcher works top "
                               "down; rewrite it with right recursion or a repetition, and do "
                               "not repeat something that can match empty");
      }
    }
  }
  return Status::Ok();
}

// Rules that can never finish: every alternative leads back into a rule that cannot finish,
// so matching would loop without ever completing.
Status CheckFinishes(const Grammar& g, int32_t* fault) {
  const std::vector<uint8_t> finishes = Derives(g, /*terminals_count=*/true);
  for (size_t r = 0; r < g.rules.size(); ++r) {
    if (finishes[r] == 0) {
      *fault = static_cast<int32_t>(r);
      return InvalidArgument("rule " + Quoted(g, r) +
                             " can never finish: every alternative recurses into a rule that "
                             "cannot finish (it needs an alternative without the recursion)");
    }
  }
  return Status::Ok();
}

// ---- Printing ----

void AppendHex(const char* format, uint32_t v, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof buf, format, v);
  *out += buf;
}

void AppendCodepoint(uint32_t cp, bool in_class, std::string* out) {
  switch (cp) {
    case '\n': *out += "\\n"; return;
    case '\r': *out += "\\r"; return;
    case '\t': *out += "\\t"; return;
    case '\\': *out += "\\\\"; return;
    default: break;
  }
  if (!in_class && cp == '"') {
    *out += "\\\"";
  } else if (in_class && (cp == ']' || cp == '[' || cp == '-')) {
    *out += '\\';
    *out += static_cast<char>(cp);
  } else if (in_class && cp == '^') {
    *out += "\\x5E";
  } else if (cp >= 0x20 && cp < 0x7F) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x100) {
    AppendHex("\\x%02X", cp, out);
  } else if (cp < 0x10000) {
    AppendHex("\\u%04X", cp, out);
  } else {
    AppendHex("\\U%08X", cp, out);
  }
}

bool IsAnyChar(const CharClass& c) {
  return c.ranges.size() == 2 && c.ranges[0] == CodepointRange{0, kSurrogateLo - 1} &&
         c.ranges[1] == CodepointRange{kSurrogateHi + 1, kMaxCodepoint};
}

void AppendRanges(const CharClass& c, std::string* out) {
  for (const CodepointRange& r : c.ranges) {
    AppendCodepoint(r.lo, true, out);
    if (r.hi == r.lo) continue;
    if (r.hi != r.lo + 1) *out += '-';
    AppendCodepoint(r.hi, true, out);
  }
}

void AppendClass(const CharClass& c, std::string* out) {
  if (IsAnyChar(c)) {
    *out += '.';
  } else if (!c.ranges.empty() && c.ranges.back().hi == kMaxCodepoint) {
    *out += "[^";
    AppendRanges(Complement(c), out);
    *out += ']';
  } else {
    *out += '[';
    AppendRanges(c, out);
    *out += ']';
  }
}

bool IsNameChar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '-';
}

// GBNF names for the rules: letters, digits and '-' (anything else becomes '-'), unique, and
// "root" for the root rule.
std::vector<std::string> PrintNames(const Grammar& g) {
  std::vector<std::string> names(g.rules.size());
  std::unordered_set<std::string> used;
  std::unordered_map<std::string, int> next_suffix;
  const bool root_ok = g.root >= 0 && static_cast<size_t>(g.root) < g.rules.size();
  if (root_ok) {
    names[static_cast<size_t>(g.root)] = "root";
    used.insert("root");
  }
  for (size_t r = 0; r < g.rules.size(); ++r) {
    if (root_ok && r == static_cast<size_t>(g.root)) continue;
    std::string base = g.rules[r].name;
    for (char& ch : base) {
      if (!IsNameChar(ch)) ch = '-';
    }
    if (base.empty()) base = "rule";
    std::string name = base;
    int& suffix = next_suffix[base];
    while (used.count(name) != 0) name = base + "-" + std::to_string(++suffix);
    used.insert(name);
    names[r] = std::move(name);
  }
  return names;
}

void AppendSequence(const Grammar& g, const std::vector<std::string>& names, const Sequence& seq,
                    std::string* out) {
  if (seq.empty()) {
    *out += "\"\"";
    return;
  }
  bool in_literal = false;
  bool first = true;
  for (const Element& e : seq) {
    const bool valid =
        e.index >= 0 && static_cast<size_t>(e.index) <
                            (e.kind == Element::Kind::kRule ? g.rules.size() : g.classes.size());
    const CharClass* c = valid && e.kind == Element::Kind::kChars
                             ? &g.classes[static_cast<size_t>(e.index)]
                             : nullptr;
    const bool single = c != nullptr && c->ranges.size() == 1 && c->ranges[0].lo == c->ranges[0].hi;
    if (single && in_literal) {
      AppendCodepoint(c->ranges[0].lo, false, out);
      continue;
    }
    if (in_literal) *out += '"';
    in_literal = false;
    if (!first) *out += ' ';
    first = false;
    if (single) {
      *out += '"';
      AppendCodepoint(c->ranges[0].lo, false, out);
      in_literal = true;
    } else if (c != nullptr) {
      AppendClass(*c, out);
    } else if (valid) {
      *out += names[static_cast<size_t>(e.index)];
    } else {
      *out += "invalid-" + std::to_string(e.index);  // only for a grammar that fails validation
    }
  }
  if (in_literal) *out += '"';
}

}  // namespace

Status ValidateGrammarAt(const Grammar& g, const GrammarLimits& limits, int32_t* rule_at_fault) {
  *rule_at_fault = -1;
  VLS_RETURN_IF_ERROR(CheckShape(g, limits, rule_at_fault));
  const std::vector<uint8_t> nullable = Derives(g, /*terminals_count=*/false);
  VLS_RETURN_IF_ERROR(CheckLeftRecursion(g, nullable, rule_at_fault));
  return CheckFinishes(g, rule_at_fault);
}

Status ValidateGrammar(const Grammar& g, const GrammarLimits& limits) {
  int32_t fault = -1;
  return ValidateGrammarAt(g, limits, &fault);
}

std::string PrintGbnf(const Grammar& g) {
  const std::vector<std::string> names = PrintNames(g);
  std::string out;
  for (size_t r = 0; r < g.rules.size(); ++r) {
    out += names[r];
    out += " ::=";
    bool first = true;
    for (const Sequence& seq : g.rules[r].alternatives) {
      out += first ? " " : " | ";
      first = false;
      AppendSequence(g, names, seq, &out);
    }
    out += '\n';
  }
  return out;
}

}  // namespace vls::grammar
