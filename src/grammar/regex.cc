// Regular expressions to grammars (regex.h). The pattern is parsed into a small tree, repetitions
// of what can match empty are rewritten so that no rule is left-recursive, the size of the
// grammar it will give is computed and checked against GrammarLimits, and only then is anything
// added to the builder.
//
// The subset (ECMA-262 syntax): literals; escapes \d \w \s \D \W \S, \n \t \r \f \v \0, \xHH,
// \uHHHH, \u{H...}, an escaped non-alphanumeric ASCII character; `.` (anything but \n \r
// U+2028 U+2029); classes [...] and [^...] with ranges and escapes ([\b] is backspace, [^] is
// any character); groups (...), (?:...), (?<name>...), (?P<name>...); alternation; * + ? {m}
// {m,} {m,n}, each optionally lazy (a trailing ?, which means the same for a whole-string match);
// ^ at the start and $ at the end of a top-level branch. A `{` that does not start a quantifier
// is a literal (as ECMA-262's Annex B reads it). Refused by name: backreferences, lookaround,
// atomic groups, possessive quantifiers, inline flags, word boundaries, Unicode property escapes,
// \c controls, anchors anywhere else.
#include "grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/json_schema_regex.h"

namespace vls::grammar {
namespace {

using Node = RegexNode;

Node CharsNode(CharClass c) { return RegexChars(std::move(c)); }

CharClass Single(uint32_t cp) { return CharClass{{{cp, cp}}}; }

CharClass DigitClass() { return CharClass{{{'0', '9'}}}; }
CharClass WordClass() { return CharClass{{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}}; }
CharClass SpaceClass() {
  // ECMA-262 WhiteSpace and LineTerminator.
  return CharClass{{{0x09, 0x0D},
                    {0x20, 0x20},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}}};
}
CharClass DotClass() {
  CharClass c{{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}};
  return Complement(c);
}
CharClass AnyClass() { return RegexAnyClass(); }

class Parser {
 public:
  Parser(std::string_view pattern, const GrammarLimits& limits) : p_(pattern), limits_(limits) {}

  // The whole pattern; top-level branches with their anchors.
  Status ParseTop(std::vector<Node>* branches, std::vector<std::pair<bool, bool>>* anchors) {
    while (true) {
      bool start = false;
      bool end = false;
      Node seq;
      VLS_RETURN_IF_ERROR(ParseSeq(/*top=*/true, &seq, &start, &end));
      branches->push_back(std::move(seq));
      anchors->emplace_back(start, end);
      if (i_ >= p_.size()) break;
      if (p_[i_] == ')') return Error("unmatched )");
      ++i_;  // '|'
    }
    return Status::Ok();
  }

 private:
  Status Error(std::string_view what) const { return ErrorAt(i_, what); }
  Status ErrorAt(size_t offset, std::string_view what) const {
    return InvalidArgument("regex: " + std::string(what) + " at offset " + std::to_string(offset));
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  bool LookingAt(std::string_view s) const { return p_.substr(i_).starts_with(s); }

  Status ParseAlt(Node* out) {
    std::vector<Node> branches;
    while (true) {
      Node seq;
      bool unused_start = false;
      bool unused_end = false;
      VLS_RETURN_IF_ERROR(ParseSeq(/*top=*/false, &seq, &unused_start, &unused_end));
      branches.push_back(std::move(seq));
      if (AtEnd() || p_[i_] != '|') break;
      ++i_;
    }
    if (branches.size() == 1) {
      *out = std::move(branches[0]);
    } else {
      out->kind = Node::Kind::kAlt;
      out->kids = std::move(branches);
    }
    return Status::Ok();
  }

  Status ParseSeq(bool top, Node* out, bool* anchor_start, bool* anchor_end) {
    out->kind = Node::Kind::kSeq;
    if (top && !AtEnd() && p_[i_] == '^') {
      *anchor_start = true;
      ++i_;
    }
    while (!AtEnd() && p_[i_] != '|' && p_[i_] != ')') {
      const char c = p_[i_];
      if (c == '^') return Error("anchor ^ in the middle of the pattern is not supported");
      if (c == '$') {
        if (top && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) {
          *anchor_end = true;
          ++i_;
          break;
        }
        return Error("anchor $ in the middle of the pattern is not supported");
      }
      Node atom;
      VLS_RETURN_IF_ERROR(ParseAtom(&atom));
      VLS_RETURN_IF_ERROR(ParseQuantifier(&atom));
      out->kids.push_back(std::move(atom));
    }
    return Status::Ok();
  }

  // A counted quantifier {m}, {m,}, {m,n} at i_; false (i_ unchanged) if the text is not one.
  bool ReadBraces(int* min, int* max, bool* too_big) {
    size_t j = i_ + 1;
    auto number = [&](int* v) {
      const size_t start = j;
      int64_t n = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        n = std::min<int64_t>(n * 10 + (p_[j] - '0'), int64_t{1} << 40);
        ++j;
      }
      if (n > limits_.max_repeat) *too_big = true;
      *v = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
      return j > start;
    };
    if (!number(min)) return false;
    *max = *min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (j < p_.size() && p_[j] == '}') {
        *max = -1;
      } else if (!number(max)) {
        return false;
      }
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    return true;
  }

  Status ParseQuantifier(Node* atom) {
    if (AtEnd()) return Status::Ok();
    const size_t at = i_;
    int min = 0;
    int max = 0;
    bool too_big = false;
    const char c = p_[i_];
    if (c == '*') {
      max = -1;
      ++i_;
    } else if (c == '+') {
      min = 1;
      max = -1;
      ++i_;
    } else if (c == '?') {
      max = 1;
      ++i_;
    } else if (c == '{' && ReadBraces(&min, &max, &too_big)) {
      if (too_big) {
        return ErrorAt(at,
                       "repetition count over the limit of " + std::to_string(limits_.max_repeat));
      }
      if (max >= 0 && max < min) return ErrorAt(at, "repetition {m,n} with n < m");
    } else {
      return Status::Ok();
    }
    if (!AtEnd() && p_[i_] == '?') {
      ++i_;  // lazy: the same language
    } else if (!AtEnd() && p_[i_] == '+') {
      return Error("possessive quantifier is not supported");
    }
    if (!AtEnd() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?')) {
      return Error("quantifier after a quantifier");
    }
    int ignored_min = 0;
    int ignored_max = 0;
    bool ignored = false;
    if (!AtEnd() && p_[i_] == '{') {
      const size_t save = i_;
      if (ReadBraces(&ignored_min, &ignored_max, &ignored)) {
        i_ = save;
        return Error("quantifier after a quantifier");
      }
    }
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.kids.push_back(std::move(*atom));
    *atom = std::move(rep);
    return Status::Ok();
  }

  // One UTF-8 encoded code point at i_.
  Status ReadCodepoint(uint32_t* cp) {
    uint32_t v = 0;
    const int len = DecodeUtf8(p_, i_, &v);
    if (len == 0) return Error("invalid UTF-8");
    i_ += static_cast<size_t>(len);
    *cp = v;
    return Status::Ok();
  }

  Status ReadHex(int digits, uint32_t* out) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (AtEnd() || HexValue(p_[i_]) < 0) return Error("expected a hex digit");
      v = v * 16 + static_cast<uint32_t>(HexValue(p_[i_]));
      ++i_;
    }
    *out = v;
    return Status::Ok();
  }

  // An escape after the backslash at i_ - 1; a class (for \d and the like) or one code point.
  Status ParseEscape(bool in_class, CharClass* out, bool* is_class) {
    if (AtEnd()) return Error("pattern ends in a backslash");
    const size_t at = i_ - 1;
    const char c = p_[i_++];
    *is_class = false;
    uint32_t cp = 0;
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S': {
        const char lower = static_cast<char>(c | 0x20);
        CharClass k = lower == 'd' ? DigitClass() : lower == 'w' ? WordClass() : SpaceClass();
        Normalize(&k);
        *out = c == lower ? k : Complement(k);
        *is_class = true;
        return Status::Ok();
      }
      case 'n': cp = '\n'; break;
      case 't': cp = '\t'; break;
      case 'r': cp = '\r'; break;
      case 'f': cp = '\f'; break;
      case 'v': cp = '\v'; break;
      case '0':
        if (!AtEnd() && p_[i_] >= '0' && p_[i_] <= '9') {
          return ErrorAt(at, "octal escape is not supported");
        }
        cp = 0;
        break;
      case 'x': VLS_RETURN_IF_ERROR(ReadHex(2, &cp)); break;
      case 'u':
        if (!AtEnd() && p_[i_] == '{') {
          ++i_;
          const size_t start = i_;
          cp = 0;
          while (!AtEnd() && HexValue(p_[i_]) >= 0 && i_ - start < 6) {
            cp = cp * 16 + static_cast<uint32_t>(HexValue(p_[i_]));
            ++i_;
          }
          if (i_ == start || AtEnd() || p_[i_] != '}') return Error("malformed \\u{...} escape");
          ++i_;
        } else {
          VLS_RETURN_IF_ERROR(ReadHex(4, &cp));
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return ErrorAt(at, "escape of a surrogate or beyond U+10FFFF is not supported");
        }
        break;
      case 'b':
        if (in_class) {
          cp = 0x08;
          break;
        }
        return ErrorAt(at, "word boundary \\b is not supported");
      case 'B': return ErrorAt(at, "word boundary \\B is not supported");
      case 'k': return ErrorAt(at, "named backreference \\k is not supported");
      case 'p':
      case 'P': return ErrorAt(at, "Unicode property escape \\p is not supported");
      case 'c': return ErrorAt(at, "control escape \\c is not supported");
      case 'A':
      case 'z':
      case 'Z':
      case 'G': return ErrorAt(at, "anchor escape is not supported");
      default:
        if (c >= '1' && c <= '9') return ErrorAt(at, "backreference is not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          return ErrorAt(at, std::string("unknown escape \\") + c);
        }
        if (static_cast<unsigned char>(c) >= 0x80) {
          --i_;
          VLS_RETURN_IF_ERROR(ReadCodepoint(&cp));
        } else {
          cp = static_cast<unsigned char>(c);
        }
    }
    *out = Single(cp);
    return Status::Ok();
  }

  Status ParseClassAtom(CharClass* out, bool* is_class) {
    if (p_[i_] == '\\') {
      ++i_;
      return ParseEscape(/*in_class=*/true, out, is_class);
    }
    uint32_t cp = 0;
    VLS_RETURN_IF_ERROR(ReadCodepoint(&cp));
    *out = Single(cp);
    *is_class = false;
    return Status::Ok();
  }

  Status ParseClass(Node* out) {
    const size_t open = i_;
    ++i_;  // '['
    bool negate = false;
    if (!AtEnd() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    CharClass set;
    if (!AtEnd() && p_[i_] == ']') {
      ++i_;
      if (!negate) return ErrorAt(open, "empty class [] matches nothing");
      *out = CharsNode(AnyClass());
      return Status::Ok();
    }
    while (true) {
      if (AtEnd()) return ErrorAt(open, "unterminated class");
      if (p_[i_] == ']') {
        ++i_;
        break;
      }
      CharClass lo;
      bool lo_class = false;
      VLS_RETURN_IF_ERROR(ParseClassAtom(&lo, &lo_class));
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        const size_t dash = i_;
        ++i_;
        CharClass hi;
        bool hi_class = false;
        VLS_RETURN_IF_ERROR(ParseClassAtom(&hi, &hi_class));
        if (lo_class || hi_class) return ErrorAt(dash, "range with a class escape");
        if (lo.ranges[0].lo > hi.ranges[0].lo) return ErrorAt(dash, "range out of order");
        set.ranges.push_back({lo.ranges[0].lo, hi.ranges[0].lo});
      } else {
        set.ranges.insert(set.ranges.end(), lo.ranges.begin(), lo.ranges.end());
      }
    }
    Normalize(&set);
    if (negate) set = Complement(set);
    if (set.ranges.empty()) return ErrorAt(open, "class matches nothing");
    *out = CharsNode(std::move(set));
    return Status::Ok();
  }

  Status ParseGroup(Node* out) {
    const size_t open = i_;
    ++i_;  // '('
    if (LookingAt("?")) {
      if (LookingAt("?:")) {
        i_ += 2;
      } else if (LookingAt("?=") || LookingAt("?!")) {
        return ErrorAt(open, "lookahead is not supported");
      } else if (LookingAt("?<=") || LookingAt("?<!")) {
        return ErrorAt(open, "lookbehind is not supported");
      } else if (LookingAt("?<") || LookingAt("?P<")) {
        const size_t close = p_.find('>', i_);
        if (close == std::string_view::npos) return ErrorAt(open, "unterminated group name");
        i_ = close + 1;
      } else if (LookingAt("?P=")) {
        return ErrorAt(open, "named backreference (?P=...) is not supported");
      } else if (LookingAt("?>")) {
        return ErrorAt(open, "atomic group is not supported");
      } else if (LookingAt("?#")) {
        return ErrorAt(open, "comment group is not supported");
      } else {
        return ErrorAt(open, "inline flags or other (?...) groups are not supported");
      }
    }
    if (++depth_ > limits_.max_nesting) {
      return ErrorAt(open,
                     "groups nest deeper than the limit of " + std::to_string(limits_.max_nesting));
    }
    VLS_RETURN_IF_ERROR(ParseAlt(out));
    --depth_;
    if (AtEnd()) return ErrorAt(open, "unterminated group");
    ++i_;  // ')'
    return Status::Ok();
  }

  Status ParseAtom(Node* out) {
    const char c = p_[i_];
    switch (c) {
      case '(': return ParseGroup(out);
      case '[': return ParseClass(out);
      case '.':
        ++i_;
        *out = CharsNode(DotClass());
        return Status::Ok();
      case '*':
      case '+':
      case '?': return Error("nothing to repeat");
      case '{': {
        int min = 0;
        int max = 0;
        bool too_big = false;
        const size_t save = i_;
        if (ReadBraces(&min, &max, &too_big)) {
          i_ = save;
          return Error("nothing to repeat");
        }
        ++i_;
        *out = CharsNode(Single('{'));
        return Status::Ok();
      }
      case '\\': {
        ++i_;
        CharClass k;
        bool is_class = false;
        VLS_RETURN_IF_ERROR(ParseEscape(/*in_class=*/false, &k, &is_class));
        *out = CharsNode(std::move(k));
        return Status::Ok();
      }
      default: {
        uint32_t cp = 0;
        VLS_RETURN_IF_ERROR(ReadCodepoint(&cp));
        *out = CharsNode(Single(cp));
        return Status::Ok();
      }
    }
  }

  std::string_view p_;
  const GrammarLimits& limits_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

RegexNode RegexChars(CharClass c) {
  Normalize(&c);
  RegexNode n;
  n.kind = RegexNode::Kind::kChars;
  n.chars = std::move(c);
  return n;
}

CharClass RegexAnyClass() { return CharClass{{{0, 0x10FFFF}}}; }

Status ParseRegex(std::string_view pattern, const GrammarLimits& limits,
                  std::vector<RegexNode>* branches, std::vector<std::pair<bool, bool>>* anchors) {
  if (pattern.size() > limits.max_source_bytes) {
    return ResourceExhausted("regex: pattern of " + std::to_string(pattern.size()) +
                             " bytes is over the limit of " +
                             std::to_string(limits.max_source_bytes));
  }
  Parser parser(pattern, limits);
  return parser.ParseTop(branches, anchors);
}

StatusOr<int32_t> AddRegexRule(GrammarBuilder* builder, std::string_view pattern,
                               std::string_view rule_name, const GrammarLimits& limits) {
  return AddRegexRuleWithMode(builder, pattern, rule_name, limits, RegexMode{});
}

StatusOr<Grammar> RegexToGrammar(std::string_view pattern, const GrammarLimits& limits) {
  GrammarBuilder builder;
  VLS_ASSIGN_OR_RETURN(const int32_t root, AddRegexRule(&builder, pattern, "root", limits));
  Grammar g = std::move(builder).Build(root);
  VLS_RETURN_IF_ERROR(ValidateGrammar(g, limits));
  return g;
}

}  // namespace vls::grammar
