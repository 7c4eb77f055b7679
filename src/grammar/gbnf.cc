// ParseGbnf (gbnf.h): a recursive-descent parser of llama.cpp's GBNF syntax.
//
// Layout follows llama.cpp: a rule ends at a newline, except inside parentheses, right after
// `::=` and right after `|`, where newlines are spaces; `#` starts a comment to the end of the
// line. A repetition applies to the last item of the sequence: a whole string literal, a
// character class, `.`, a rule reference or a parenthesised group.
//
// Groups become helper rules, and a repetition becomes a reference to a helper rule built by
// GrammarBuilder::Repeat, so `x{1000}{1000}` costs 2,000 elements, not a million. Helper names
// contain '_' ("root_2-star"), which GBNF names cannot, so they never collide with the grammar's
// own rules. Every bound of GrammarLimits is checked before the thing it bounds is built.
//
// The rules come out in the order of their definitions, helpers after the rule they belong to,
// so that parsing the text PrintGbnf writes gives back the same rules in the same order.
#include "grammar/gbnf.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/grammar_check.h"

namespace vls::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A character of the source for an error message.
std::string Describe(char c) {
  if (c >= 0x21 && c < 0x7F) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
  return buf;
}

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits) : text_(text), limits_(limits) {}

  StatusOr<Grammar> Run();

 private:
  struct UserRule {
    int32_t id = -1;
    bool defined = false;
    size_t first_use = 0;  // offset of the first reference or the definition
    size_t definition = 0;
  };

  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= text_.size(); }

  std::string Where(size_t at) const;  // "line L:C"
  Status Error(size_t at, const std::string& what) const;
  void SkipSpace(bool newline_ok);
  StatusOr<int32_t> UserRuleId(std::string_view name, size_t at);
  StatusOr<int32_t> NewHelper(size_t at);
  void NoteHelpers(size_t first_id, size_t at);
  Status CountElements(size_t n, size_t at);

  Status ParseRule();
  Status ParseAlternatives(bool nested, std::vector<Sequence>* alternatives);
  Status ParseSequence(bool nested, Sequence* seq);
  StatusOr<uint32_t> ParseChar();
  Status ParseLiteral(Sequence* seq);
  Status ParseClass(Sequence* seq);
  Status ParseGroup(bool nested, Sequence* seq);
  StatusOr<int> ParseCount();
  Status ParseRepetition(bool nested, size_t operand_start, Sequence* seq);
  Status Repeat(size_t at, size_t operand_start, int min, int max, Sequence* seq);
  StatusOr<Grammar> Finish();

  std::string_view text_;
  const GrammarLimits& limits_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::unordered_map<std::string, UserRule> user_;
  std::vector<int64_t> order_;  // [rule id] position in the output; -1 until defined
  std::vector<size_t> where_;   // [rule id] source offset its errors point at
  int64_t next_order_ = 0;
  size_t elements_ = 0;  // elements built so far, across all rules
  int depth_ = 0;        // open parentheses
  std::string rule_name_;
  int helpers_ = 0;  // helper rules of the current rule
};

std::string Parser::Where(size_t at) const {
  at = std::min(at, text_.size());
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < at; ++i) {
    const auto c = static_cast<unsigned char>(text_[i]);
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++column;  // columns count code points
    }
  }
  return "line " + std::to_string(line) + ":" + std::to_string(column);
}

Status Parser::Error(size_t at, const std::string& what) const {
  return InvalidArgument("GBNF " + Where(at) + ": " + what);
}

void Parser::SkipSpace(bool newline_ok) {
  while (!AtEnd()) {
    const char c = Peek();
    if (c == '#') {
      while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
    } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
      ++pos_;
    } else {
      return;
    }
  }
}

StatusOr<int32_t> Parser::UserRuleId(std::string_view name, size_t at) {
  auto [it, inserted] = user_.try_emplace(std::string(name));
  if (!inserted) return it->second.id;
  if (b_.rule_count() + 1 > limits_.max_rules) {
    user_.erase(it);
    return Error(
        at, "more than " + std::to_string(limits_.max_rules) + " rules (GrammarLimits::max_rules)");
  }
  it->second.id = b_.AddRule(name);
  it->second.first_use = at;
  order_.push_back(-1);
  where_.push_back(at);
  return it->second.id;
}

StatusOr<int32_t> Parser::NewHelper(size_t at) {
  if (b_.rule_count() + 1 > limits_.max_rules) {
    return Error(
        at, "more than " + std::to_string(limits_.max_rules) + " rules (GrammarLimits::max_rules)");
  }
  const size_t first = b_.rule_count();
  const int32_t id = b_.AddRule(rule_name_ + "_" + std::to_string(++helpers_));
  NoteHelpers(first, at);
  return id;
}

void Parser::NoteHelpers(size_t first_id, size_t at) {
  for (size_t id = first_id; id < b_.rule_count(); ++id) {
    order_.push_back(next_order_++);
    where_.push_back(at);
  }
}

Status Parser::CountElements(size_t n, size_t at) {
  if (n > limits_.max_elements || elements_ > limits_.max_elements - n) {
    return Error(at, "more than " + std::to_string(limits_.max_elements) +
                         " elements (GrammarLimits::max_elements)");
  }
  elements_ += n;
  return Status::Ok();
}

Status Parser::ParseRule() {
  const size_t start = pos_;
  while (!AtEnd() && IsNameChar(Peek())) ++pos_;
  if (pos_ == start) {
    return Error(pos_, "expected a rule name (letters, digits and '-')");
  }
  const std::string name(text_.substr(start, pos_ - start));
  SkipSpace(false);
  if (text_.substr(pos_, 3) != "::=") return Error(pos_, "expected '::=' after '" + name + "'");
  pos_ += 3;
  VLS_ASSIGN_OR_RETURN(const int32_t id, UserRuleId(name, start));
  UserRule& rule = user_[name];
  if (rule.defined) {
    return Error(start,
                 "rule '" + name + "' is defined twice (first at " + Where(rule.definition) + ")");
  }
  rule.defined = true;
  rule.definition = start;
  order_[static_cast<size_t>(id)] = next_order_++;
  where_[static_cast<size_t>(id)] = start;
  rule_name_ = name;
  helpers_ = 0;
  SkipSpace(true);
  std::vector<Sequence> alternatives;
  VLS_RETURN_IF_ERROR(ParseAlternatives(false, &alternatives));
  b_.SetAlternatives(id, std::move(alternatives));
  if (Peek() == '\r') {
    pos_ += Peek(1) == '\n' ? 2 : 1;
  } else if (Peek() == '\n') {
    ++pos_;
  } else if (!AtEnd()) {
    return Error(pos_, "expected the end of the line, found " + Describe(Peek()));
  }
  SkipSpace(true);
  return Status::Ok();
}

Status Parser::ParseAlternatives(bool nested, std::vector<Sequence>* alternatives) {
  while (true) {
    if (alternatives->size() >= limits_.max_enum) {
      return Error(pos_, "more than " + std::to_string(limits_.max_enum) +
                             " alternatives in one rule (GrammarLimits::max_enum)");
    }
    alternatives->emplace_back();
    VLS_RETURN_IF_ERROR(ParseSequence(nested, &alternatives->back()));
    if (Peek() != '|') return Status::Ok();
    ++pos_;
    SkipSpace(true);
  }
}

Status Parser::ParseSequence(bool nested, Sequence* seq) {
  size_t operand = SIZE_MAX;  // where the last item starts in *seq (SIZE_MAX: none yet)
  while (!AtEnd()) {
    const char c = Peek();
    const size_t at = pos_;
    if (c == '"') {
      operand = seq->size();
      VLS_RETURN_IF_ERROR(ParseLiteral(seq));
    } else if (c == '[') {
      operand = seq->size();
      VLS_RETURN_IF_ERROR(ParseClass(seq));
    } else if (c == '.') {
      ++pos_;
      operand = seq->size();
      VLS_RETURN_IF_ERROR(CountElements(1, at));
      seq->push_back(b_.Chars(Complement(CharClass{})));
    } else if (c == '(') {
      operand = seq->size();
      VLS_RETURN_IF_ERROR(ParseGroup(nested, seq));
      continue;  // ParseGroup skipped the space after ')'
    } else if (IsNameChar(c)) {
      while (!AtEnd() && IsNameChar(Peek())) ++pos_;
      VLS_ASSIGN_OR_RETURN(const int32_t id, UserRuleId(text_.substr(at, pos_ - at), at));
      operand = seq->size();
      VLS_RETURN_IF_ERROR(CountElements(1, at));
      seq->push_back(b_.Ref(id));
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (operand == SIZE_MAX) {
        return Error(at, std::string("'") + c + "' has nothing before it to repeat");
      }
      VLS_RETURN_IF_ERROR(ParseRepetition(nested, operand, seq));
      continue;
    } else if (c == '<' || c == '!') {
      return Error(at, "token references (<...>, !<...>) are not supported");
    } else {
      return Status::Ok();  // '|', ')', a newline or something the caller reports
    }
    SkipSpace(nested);
  }
  return Status::Ok();
}

StatusOr<uint32_t> Parser::ParseChar() {
  const size_t at = pos_;
  const auto c = static_cast<unsigned char>(Peek());
  if (c == '\\') {
    const char e = Peek(1);
    int digits = 0;
    switch (e) {
      case 'n': pos_ += 2; return '\n';
      case 'r': pos_ += 2; return '\r';
      case 't': pos_ += 2; return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-': pos_ += 2; return static_cast<uint32_t>(e);
      case 'x': digits = 2; break;
      case 'u': digits = 4; break;
      case 'U': digits = 8; break;
      default:
        if (pos_ + 1 >= text_.size()) return Error(at, "'\\' at the end of the input");
        return Error(at, "unknown escape: '\\' followed by " + Describe(e));
    }
    uint32_t cp = 0;
    for (int k = 0; k < digits; ++k) {
      const int v = HexValue(Peek(2 + static_cast<size_t>(k)));
      if (v < 0) {
        return Error(at, std::string("expected ") + std::to_string(digits) +
                             " hex digits after '\\" + e + "'");
      }
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    pos_ += 2 + static_cast<size_t>(digits);
    if (cp > kMaxCodepoint) return Error(at, "escape is past U+10FFFF");
    if (cp >= 0xD800 && cp <= 0xDFFF) return Error(at, "escape names a surrogate, not a character");
    return cp;
  }
  // One UTF-8 character of the source.
  uint32_t cp = 0;
  const int len = DecodeUtf8(text_, pos_, &cp);
  if (len == 0) return Error(at, "invalid UTF-8");
  pos_ += static_cast<size_t>(len);
  return cp;
}

Status Parser::ParseLiteral(Sequence* seq) {
  const size_t open = pos_++;
  while (true) {
    if (AtEnd()) return Error(open, "unterminated string literal");
    if (Peek() == '"') break;
    const size_t at = pos_;
    VLS_ASSIGN_OR_RETURN(const uint32_t cp, ParseChar());
    VLS_RETURN_IF_ERROR(CountElements(1, at));
    seq->push_back(b_.Char(cp));
  }
  ++pos_;
  return Status::Ok();
}

Status Parser::ParseClass(Sequence* seq) {
  const size_t open = pos_++;
  const bool negated = Peek() == '^';
  if (negated) ++pos_;
  CharClass c;
  while (true) {
    if (AtEnd()) return Error(open, "unterminated character class");
    if (Peek() == ']') break;
    const size_t at = pos_;
    VLS_ASSIGN_OR_RETURN(const uint32_t lo, ParseChar());
    uint32_t hi = lo;
    if (Peek() == '-' && Peek(1) != ']') {
      ++pos_;
      if (AtEnd()) return Error(open, "unterminated character class");
      VLS_ASSIGN_OR_RETURN(hi, ParseChar());
      if (hi < lo) return Error(at, "character range is out of order");
    }
    if (c.ranges.size() >= limits_.max_elements) {
      return Error(at, "character class has too many ranges (GrammarLimits::max_elements)");
    }
    c.ranges.push_back({lo, hi});
  }
  ++pos_;
  VLS_RETURN_IF_ERROR(CountElements(1, open));
  seq->push_back(b_.Chars(negated ? Complement(c) : std::move(c)));
  return Status::Ok();
}

Status Parser::ParseGroup(bool nested, Sequence* seq) {
  const size_t open = pos_++;
  if (depth_ >= limits_.max_nesting) {
    return Error(open, "parentheses nested deeper than " + std::to_string(limits_.max_nesting) +
                           " (GrammarLimits::max_nesting)");
  }
  VLS_ASSIGN_OR_RETURN(const int32_t id, NewHelper(open));
  VLS_RETURN_IF_ERROR(CountElements(1, open));
  ++depth_;
  SkipSpace(true);
  std::vector<Sequence> alternatives;
  VLS_RETURN_IF_ERROR(ParseAlternatives(true, &alternatives));
  --depth_;
  if (AtEnd()) return Error(open, "unclosed '('");
  if (Peek() != ')') return Error(pos_, "expected ')', found " + Describe(Peek()));
  ++pos_;
  b_.SetAlternatives(id, std::move(alternatives));
  seq->push_back(b_.Ref(id));
  SkipSpace(nested);
  return Status::Ok();
}

StatusOr<int> Parser::ParseCount() {
  const size_t at = pos_;
  if (!IsDigit(Peek())) return Error(at, "expected a number in '{...}'");
  int64_t n = 0;
  while (IsDigit(Peek())) {
    n = n * 10 + (Peek() - '0');
    ++pos_;
    if (n > limits_.max_repeat) {
      return Error(at, "repetition count is over the limit of " +
                           std::to_string(limits_.max_repeat) + " (GrammarLimits::max_repeat)");
    }
  }
  return static_cast<int>(n);
}

Status Parser::ParseRepetition(bool nested, size_t operand_start, Sequence* seq) {
  const size_t at = pos_;
  const char c = text_[pos_++];
  int min = 0;
  int max = -1;
  if (c == '+') {
    min = 1;
  } else if (c == '?') {
    max = 1;
  } else if (c == '{') {
    SkipSpace(nested);
    VLS_ASSIGN_OR_RETURN(min, ParseCount());
    SkipSpace(nested);
    if (Peek() == '}') {
      max = min;
    } else if (Peek() == ',') {
      ++pos_;
      SkipSpace(nested);
      if (IsDigit(Peek())) {
        VLS_ASSIGN_OR_RETURN(max, ParseCount());
        SkipSpace(nested);
        if (max < min) return Error(at, "repetition {m,n} with n < m");
      }
    }
    if (Peek() != '}') return Error(pos_, "expected '}' to close '{'");
    ++pos_;
  }
  VLS_RETURN_IF_ERROR(Repeat(at, operand_start, min, max, seq));
  SkipSpace(nested);
  return Status::Ok();
}

Status Parser::Repeat(size_t at, size_t operand_start, int min, int max, Sequence* seq) {
  // What GrammarBuilder::Repeat builds, counted before it is built.
  const uint64_t s = seq->size() - operand_start;
  const auto m = static_cast<uint64_t>(min);
  const uint64_t optional = max < 0 ? 0 : static_cast<uint64_t>(max - min);
  uint64_t elements = m * s + 1;  // the rule of copies and the reference to it
  uint64_t rules = 1;
  if (max < 0) {
    elements += s + 2;
    rules += 1;
  } else if (optional > 0) {
    elements += 1 + optional * (s + 1);
    rules += optional;
  }
  if (rules > limits_.max_rules || b_.rule_count() + rules > limits_.max_rules) {
    return Error(
        at, "more than " + std::to_string(limits_.max_rules) + " rules (GrammarLimits::max_rules)");
  }
  elements_ -= s;  // the operand moves into the helper rules
  VLS_RETURN_IF_ERROR(CountElements(static_cast<size_t>(elements), at));
  const Sequence x(seq->begin() + static_cast<std::ptrdiff_t>(operand_start), seq->end());
  seq->resize(operand_start);
  const size_t first = b_.rule_count();
  const int32_t id = b_.Repeat(rule_name_ + "_" + std::to_string(++helpers_), x, min, max);
  NoteHelpers(first, at);
  seq->push_back(b_.Ref(id));
  return Status::Ok();
}

StatusOr<Grammar> Parser::Finish() {
  const UserRule* undefined = nullptr;
  std::string undefined_name;
  for (const auto& [name, rule] : user_) {
    if (!rule.defined && (undefined == nullptr || rule.first_use < undefined->first_use)) {
      undefined = &rule;
      undefined_name = name;
    }
  }
  if (undefined != nullptr) {
    return Error(undefined->first_use, "undefined rule '" + undefined_name + "'");
  }
  auto root = user_.find("root");
  if (root == user_.end()) return InvalidArgument("GBNF: the grammar has no 'root' rule");

  // Renumber the rules in definition order.
  const size_t n = b_.rule_count();
  std::vector<int32_t> by_order(n);
  std::iota(by_order.begin(), by_order.end(), 0);
  std::sort(by_order.begin(), by_order.end(), [&](int32_t a, int32_t b) {
    return order_[static_cast<size_t>(a)] < order_[static_cast<size_t>(b)];
  });
  std::vector<int32_t> new_id(n);
  for (size_t k = 0; k < n; ++k) new_id[static_cast<size_t>(by_order[k])] = static_cast<int32_t>(k);
  Grammar built = std::move(b_).Build(root->second.id);
  Grammar g;
  g.classes = std::move(built.classes);
  g.rules.resize(n);
  std::vector<size_t> where(n);
  for (size_t old = 0; old < n; ++old) {
    const auto id = static_cast<size_t>(new_id[old]);
    g.rules[id] = std::move(built.rules[old]);
    where[id] = where_[old];
    for (Sequence& seq : g.rules[id].alternatives) {
      for (Element& e : seq) {
        if (e.kind == Element::Kind::kRule) e.index = new_id[static_cast<size_t>(e.index)];
      }
    }
  }
  g.root = new_id[static_cast<size_t>(built.root)];

  int32_t fault = -1;
  const Status valid = ValidateGrammarAt(g, limits_, &fault);
  if (!valid.ok()) {
    if (fault < 0) return InvalidArgument("GBNF: " + valid.message());
    return Error(where[static_cast<size_t>(fault)], valid.message());
  }
  return g;
}

StatusOr<Grammar> Parser::Run() {
  if (text_.size() > limits_.max_source_bytes) {
    return InvalidArgument(
        "GBNF grammar of " + std::to_string(text_.size()) + " bytes is over the limit of " +
        std::to_string(limits_.max_source_bytes) + " bytes (GrammarLimits::max_source_bytes)");
  }
  SkipSpace(true);
  while (!AtEnd()) VLS_RETURN_IF_ERROR(ParseRule());
  return Finish();
}

}  // namespace

StatusOr<Grammar> ParseGbnf(std::string_view text, const GrammarLimits& limits) {
  Parser parser(text, limits);
  return parser.Run();
}

}  // namespace vls::grammar
