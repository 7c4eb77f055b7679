// The JSON lexical rules of the JSON Schema front end (json_schema_internal.h): bounded
// whitespace, strings, numbers, any value, integer and number ranges, literal values and the
// "any key but these" rule of additionalProperties.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grammar/json_schema_internal.h"
#include "io/untrusted_json.h"

namespace vls::grammar::json_schema_internal {
namespace {

CharClass Range(uint32_t lo, uint32_t hi) { return CharClass{{{lo, hi}}}; }

// Decimal digits of v.
std::string Digits(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string PointerChild(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string At(const std::string& path) { return "at " + (path.empty() ? "/" : path); }

int32_t SchemaCompiler::NewRule(std::string_view name, std::vector<Sequence> alternatives) {
  std::string clean;
  for (const char c : name) {
    if (clean.size() >= 40) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    clean += ok ? c : '-';
  }
  const int32_t id = b_->AddRule(prefix_ + "-" + clean);
  b_->SetAlternatives(id, std::move(alternatives));
  return id;
}

int32_t SchemaCompiler::Ws() {
  auto it = cache_.find("ws");
  if (it != cache_.end()) return it->second;
  const int32_t indent = b_->Repeat(
      prefix_ + "-indent", {b_->Chars(CharClass{{{'\t', '\t'}, {' ', ' '}}})}, 0, kMaxIndent);
  const int32_t id = NewRule("ws", {{}, {b_->Char(' ')}, {b_->Char('\n'), Ref(indent)}});
  cache_["ws"] = id;
  return id;
}

int32_t SchemaCompiler::RawStringChars(CharClass* raw) {
  CharClass not_raw{{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}};
  *raw = Complement(not_raw);
  return b_->Chars(*raw).index;
}

int32_t SchemaCompiler::StringChar() {
  auto it = cache_.find("char");
  if (it != cache_.end()) return it->second;
  CharClass raw;
  RawStringChars(&raw);
  const Element hex = b_->Chars(CharClass{{{'0', '9'}, {'A', 'F'}, {'a', 'f'}}});
  // \uXXXX outside the surrogates (a character beyond the BMP is written raw).
  const int32_t u4 = NewRule(
      "u4", {{b_->Chars(CharClass{{{'0', '9'}, {'A', 'C'}, {'a', 'c'}}}), hex, hex, hex},
             {b_->Chars(CharClass{{{'D', 'D'}, {'d', 'd'}}}), b_->Chars(Range('0', '7')), hex, hex},
             {b_->Chars(CharClass{{{'E', 'F'}, {'e', 'f'}}}), hex, hex, hex}});
  const Element bs = b_->Char('\\');
  const int32_t escape = NewRule("escape", {{bs, b_->Chars(CharClass{{{'"', '"'},
                                                                      {'/', '/'},
                                                                      {'\\', '\\'},
                                                                      {'b', 'b'},
                                                                      {'f', 'f'},
                                                                      {'n', 'n'},
                                                                      {'r', 'r'},
                                                                      {'t', 't'}}})},
                                            {bs, b_->Char('u'), Ref(u4)}});
  cache_["escape"] = escape;
  const int32_t id = NewRule("char", {{b_->Chars(raw)}, {Ref(escape)}});
  cache_["char"] = id;
  return id;
}

int32_t SchemaCompiler::AnyString() {
  auto it = cache_.find("string");
  if (it != cache_.end()) return it->second;
  const int32_t chars = b_->Repeat(prefix_ + "-chars", {Ref(StringChar())}, 0, -1);
  const int32_t id = NewRule("string", {{b_->Char('"'), Ref(chars), b_->Char('"')}});
  cache_["string"] = id;
  return id;
}

int32_t SchemaCompiler::AnyInteger() {
  auto it = cache_.find("integer");
  if (it != cache_.end()) return it->second;
  const int32_t more =
      b_->Repeat(prefix_ + "-digits", {b_->Chars(Range('0', '9'))}, 0, kMaxIntDigits - 1);
  const int32_t natural =
      NewRule("natural", {{b_->Char('0')}, {b_->Chars(Range('1', '9')), Ref(more)}});
  const int32_t id = NewRule("integer", {{Ref(natural)}, {b_->Char('-'), Ref(natural)}});
  cache_["integer"] = id;
  cache_["natural"] = natural;
  return id;
}

int32_t SchemaCompiler::AnyNumber() {
  auto it = cache_.find("number");
  if (it != cache_.end()) return it->second;
  const int32_t integer = AnyInteger();
  const Element digit = b_->Chars(Range('0', '9'));
  const int32_t frac_digits = b_->Repeat(prefix_ + "-frac", {digit}, 1, kMaxFracDigits);
  const int32_t frac = NewRule("frac", {{}, {b_->Char('.'), Ref(frac_digits)}});
  const int32_t exp_digits = b_->Repeat(prefix_ + "-exp", {digit}, 1, kMaxExpDigits);
  const int32_t exp =
      NewRule("exponent", {{},
                           {b_->Chars(CharClass{{{'E', 'E'}, {'e', 'e'}}}),
                            b_->Chars(CharClass{{{'+', '+'}, {'-', '-'}}}), Ref(exp_digits)},
                           {b_->Chars(CharClass{{{'E', 'E'}, {'e', 'e'}}}), Ref(exp_digits)}});
  const int32_t id = NewRule("number", {{Ref(integer), Ref(frac), Ref(exp)}});
  cache_["number"] = id;
  return id;
}

int32_t SchemaCompiler::AnyValue() {
  auto it = cache_.find("value");
  if (it != cache_.end()) return it->second;
  const int32_t value = b_->AddRule(prefix_ + "-value");
  cache_["value"] = value;
  const int32_t ws = Ws();
  const int32_t string = AnyString();
  // object ::= "{" ws "}" | "{" ws member (ws "," ws member)* ws "}"
  const int32_t member =
      NewRule("member", {{Ref(string), Ref(ws), b_->Char(':'), Ref(ws), Ref(value)}});
  const int32_t more_members = b_->Repeat(
      prefix_ + "-members",
      {Ref(NewRule("next-member", {{Ref(ws), b_->Char(','), Ref(ws), Ref(member)}}))}, 0, -1);
  const int32_t object = NewRule(
      "object", {{b_->Char('{'), Ref(ws), b_->Char('}')},
                 {b_->Char('{'), Ref(ws), Ref(member), Ref(more_members), Ref(ws), b_->Char('}')}});
  const int32_t more_items = b_->Repeat(
      prefix_ + "-items",
      {Ref(NewRule("next-item", {{Ref(ws), b_->Char(','), Ref(ws), Ref(value)}}))}, 0, -1);
  const int32_t array = NewRule(
      "array", {{b_->Char('['), Ref(ws), b_->Char(']')},
                {b_->Char('['), Ref(ws), Ref(value), Ref(more_items), Ref(ws), b_->Char(']')}});
  cache_["object"] = object;
  cache_["array"] = array;
  b_->SetAlternatives(value, {{Ref(object)},
                              {Ref(array)},
                              {Ref(string)},
                              {Ref(AnyNumber())},
                              Lit("true"),
                              Lit("false"),
                              Lit("null")});
  return value;
}

int32_t SchemaCompiler::AnyObject() {
  AnyValue();
  return cache_["object"];
}

int32_t SchemaCompiler::AnyArray() {
  AnyValue();
  return cache_["array"];
}

// Alternatives (digit-class sequences) for the decimal strings of equal length from lo to hi.
static void EqualLengthRange(GrammarBuilder* b, const std::string& lo, const std::string& hi,
                             Sequence prefix, std::vector<Sequence>* out) {
  const size_t n = lo.size();
  size_t k = 0;
  while (k < n && lo[k] == hi[k]) prefix.push_back(b->Char(static_cast<uint32_t>(lo[k++])));
  if (k == n) {
    out->push_back(std::move(prefix));
    return;
  }
  const std::string lo_rest = lo.substr(k + 1);
  const std::string hi_rest = hi.substr(k + 1);
  const bool lo_zeros = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool hi_nines = hi_rest.find_first_not_of('9') == std::string::npos;
  const Element any = b->Chars(Range('0', '9'));
  auto tail = [&](uint32_t first_lo, uint32_t first_hi) {
    Sequence s = prefix;
    s.push_back(b->Chars(Range(first_lo, first_hi)));
    for (size_t i = 0; i < lo_rest.size(); ++i) s.push_back(any);
    out->push_back(std::move(s));
  };
  uint32_t mid_lo = static_cast<unsigned char>(lo[k]) + 1;
  uint32_t mid_hi = static_cast<unsigned char>(hi[k]) - 1;
  if (lo_zeros) {
    mid_lo = static_cast<unsigned char>(lo[k]);
  } else {
    Sequence p = prefix;
    p.push_back(b->Char(static_cast<unsigned char>(lo[k])));
    EqualLengthRange(b, lo_rest, std::string(lo_rest.size(), '9'), std::move(p), out);
  }
  if (hi_nines) mid_hi = static_cast<unsigned char>(hi[k]);
  if (mid_lo <= mid_hi) tail(mid_lo, mid_hi);
  if (!hi_nines) {
    Sequence p = prefix;
    p.push_back(b->Char(static_cast<unsigned char>(hi[k])));
    EqualLengthRange(b, std::string(hi_rest.size(), '0'), hi_rest, std::move(p), out);
  }
}

// Alternatives for the naturals in [lo, hi] (hi nullopt: up to kMaxIntDigits digits), written
// without leading zeros.
static std::vector<Sequence> NaturalRange(GrammarBuilder* b, const std::string& prefix, uint64_t lo,
                                          std::optional<uint64_t> hi) {
  std::vector<Sequence> out;
  if (hi && lo > *hi) return out;
  const size_t lo_len = Digits(lo).size();
  const size_t hi_len = hi ? Digits(*hi).size() : static_cast<size_t>(kMaxIntDigits);
  for (size_t len = lo_len; len <= hi_len; ++len) {
    const std::string first = len == lo_len ? Digits(lo) : "1" + std::string(len - 1, '0');
    if (!hi && len > lo_len) {
      // Every longer length at once: [1-9] [0-9]{lo_len, kMaxIntDigits - 1}.
      const int32_t rest = b->Repeat(prefix + "-digits", {b->Chars(Range('0', '9'))},
                                     static_cast<int>(lo_len), kMaxIntDigits - 1);
      out.push_back({b->Chars(Range('1', '9')), b->Ref(rest)});
      break;
    }
    const std::string last = (hi && len == hi_len) ? Digits(*hi) : std::string(len, '9');
    EqualLengthRange(b, first, last, {}, &out);
  }
  return out;
}

int32_t SchemaCompiler::IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return kNone;
  std::vector<Sequence> alts;
  // Non-negative part [max(lo, 0), hi].
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> z;
    if (hi) z = static_cast<uint64_t>(*hi);
    for (Sequence& s : NaturalRange(b_, prefix_, a, z)) alts.push_back(std::move(s));
  }
  // Negative part: "-" and the magnitudes [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < -1 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    std::optional<uint64_t> z;
    if (lo) z = static_cast<uint64_t>(-(*lo + 1)) + 1;
    for (Sequence& s : NaturalRange(b_, prefix_, a, z)) {
      s.insert(s.begin(), b_->Char('-'));
      alts.push_back(std::move(s));
    }
  }
  if (alts.empty()) return kNone;
  return NewRule("int-range", std::move(alts));
}

int32_t SchemaCompiler::NumberRange(std::optional<int64_t> lo, bool lo_exclusive,
                                    std::optional<int64_t> hi, bool hi_exclusive) {
  // Integers within the bounds (also written with a zero fraction, 3.0); non-integers x with
  // floor(x) in [lo, hi - 1] (the same for exclusive bounds): a non-negative one with its
  // integer part in [max(lo, 0), hi - 1], a negative one with the magnitude of its integer
  // part in [max(-hi, 0), -lo - 1].
  std::vector<Sequence> alts;
  std::optional<int64_t> int_lo = lo;
  std::optional<int64_t> int_hi = hi;
  if (int_lo && lo_exclusive) *int_lo += 1;
  if (int_hi && hi_exclusive) *int_hi -= 1;
  const Element digit = b_->Chars(Range('0', '9'));
  const int32_t zeros = b_->Repeat(prefix_ + "-zeros", {b_->Char('0')}, 1, kMaxFracDigits);
  const int32_t ints = IntegerRange(int_lo, int_hi);
  if (ints != kNone) {
    alts.push_back({Ref(ints)});
    alts.push_back({Ref(ints), b_->Char('.'), Ref(zeros)});  // 3.0 is the integer 3
  }
  // "." then digits of which at least one is not zero.
  const int32_t lead = b_->Repeat(prefix_ + "-zeros", {b_->Char('0')}, 0, kMaxFracDigits - 1);
  const int32_t rest = b_->Repeat(prefix_ + "-frac", {digit}, 0, kMaxFracDigits - 1);
  const int32_t frac =
      NewRule("nonzero-frac", {{b_->Char('.'), Ref(lead), b_->Chars(Range('1', '9')), Ref(rest)}});
  if (!hi || *hi >= 1) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> z;
    if (hi) z = static_cast<uint64_t>(*hi - 1);
    for (Sequence& s : NaturalRange(b_, prefix_, a, z)) {
      s.push_back(Ref(frac));
      alts.push_back(std::move(s));
    }
  }
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 0;
    std::optional<uint64_t> z;
    if (lo) z = static_cast<uint64_t>(-*lo) - 1;
    for (Sequence& s : NaturalRange(b_, prefix_, a, z)) {
      s.insert(s.begin(), b_->Char('-'));
      s.push_back(Ref(frac));
      alts.push_back(std::move(s));
    }
  }
  if (alts.empty()) return kNone;
  return NewRule("num-range", std::move(alts));
}

int32_t SchemaCompiler::FracCompare(const std::string& digits, bool greater, bool strict) {
  const Element digit = b_->Chars(Range('0', '9'));
  const int32_t any = b_->Repeat(prefix_ + "-frac", {digit}, 0, kMaxFracDigits);
  // What may follow once every digit of `digits` has been matched (the rest compares with 0).
  int32_t next = kNone;
  if (greater) {
    if (strict) {
      const int32_t zeros = b_->Repeat(prefix_ + "-zeros", {b_->Char('0')}, 0, kMaxFracDigits);
      next = NewRule("frac-gt0", {{Ref(zeros), b_->Chars(Range('1', '9')), Ref(any)}});
    } else {
      next = any;
    }
  } else if (!strict) {
    next = b_->Repeat(prefix_ + "-zeros", {b_->Char('0')}, 0, kMaxFracDigits);
  }
  for (size_t i = digits.size(); i-- > 0;) {
    const auto d = static_cast<uint32_t>(static_cast<unsigned char>(digits[i]));
    std::vector<Sequence> alts;
    if (greater && d < '9') alts.push_back({b_->Chars(Range(d + 1, '9')), Ref(any)});
    if (!greater && d > '0') alts.push_back({b_->Chars(Range('0', d - 1)), Ref(any)});
    if (next != kNone) alts.push_back({b_->Char(d), Ref(next)});
    // Ending here leaves the rest of `digits` (not all zeros): below it.
    if (!greater && i > 0) alts.push_back({});
    next = NewRule("frac-cmp", std::move(alts));
  }
  return next;
}

Sequence SchemaCompiler::ValueLiteral(const Json& v) {
  const int32_t ws = Ws();
  if (v.is_object()) {
    Sequence s = {b_->Char('{'), Ref(ws)};
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) s.insert(s.end(), {Ref(ws), b_->Char(','), Ref(ws)});
      first = false;
      Sequence key = Lit(DumpJsonSafe(Json(k)));
      s.insert(s.end(), key.begin(), key.end());
      s.insert(s.end(), {Ref(ws), b_->Char(':'), Ref(ws)});
      Sequence val = ValueLiteral(x);
      s.insert(s.end(), val.begin(), val.end());
    }
    if (!first) s.push_back(Ref(ws));
    s.push_back(b_->Char('}'));
    return s;
  }
  if (v.is_array()) {
    Sequence s = {b_->Char('['), Ref(ws)};
    bool first = true;
    for (const Json& x : v) {
      if (!first) s.insert(s.end(), {Ref(ws), b_->Char(','), Ref(ws)});
      first = false;
      Sequence val = ValueLiteral(x);
      s.insert(s.end(), val.begin(), val.end());
    }
    if (!first) s.push_back(Ref(ws));
    s.push_back(b_->Char(']'));
    return s;
  }
  return Lit(DumpJsonSafe(v));
}

namespace {

struct TrieNode {
  std::map<uint32_t, TrieNode*> next;
  bool terminal = false;
  int32_t rule = -1;
};

// The code points of valid UTF-8 text.
std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const int len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace

int32_t SchemaCompiler::KeyNotIn(const std::vector<std::string>& names) {
  if (names.empty()) return AnyString();
  // The written (escaped) form of each name, as code points, in a trie; a key leaves the trie
  // with a character no name has there (then any rest), or ends where no name ends.
  std::vector<std::unique_ptr<TrieNode>> nodes;
  nodes.push_back(std::make_unique<TrieNode>());
  for (const std::string& name : names) {
    const std::string written = DumpJsonSafe(Json(name));
    TrieNode* n = nodes[0].get();
    for (const uint32_t cp : DecodeUtf8(written.substr(1, written.size() - 2))) {
      auto [it, added] = n->next.emplace(cp, nullptr);
      if (added) {
        nodes.push_back(std::make_unique<TrieNode>());
        it->second = nodes.back().get();
      }
      n = it->second;
    }
    n->terminal = true;
  }
  CharClass raw;
  RawStringChars(&raw);
  StringChar();
  const int32_t escape = cache_["escape"];
  const int32_t rest = b_->Repeat(prefix_ + "-key-rest", {Ref(StringChar())}, 0, -1);
  const int32_t tail = NewRule("key-tail", {{Ref(rest), b_->Char('"')}});
  // Children were created after their parents: build from the back.
  for (size_t i = nodes.size(); i-- > 0;) {
    TrieNode& n = *nodes[i];
    std::vector<Sequence> alts;
    CharClass not_free = Complement(raw);
    for (const auto& [cp, child] : n.next) {
      not_free.ranges.push_back({cp, cp});
      alts.push_back({b_->Char(cp), Ref(child->rule)});
    }
    Normalize(&not_free);
    const CharClass free = Complement(not_free);
    if (!free.ranges.empty()) alts.push_back({b_->Chars(free), Ref(tail)});
    // An escape where no name has one: the escape and any rest.
    if (n.next.count('\\') == 0) alts.push_back({Ref(escape), Ref(tail)});
    if (!n.terminal) alts.push_back({b_->Char('"')});
    n.rule = NewRule("key", std::move(alts));
  }
  const int32_t first = nodes[0]->rule;
  return NewRule("key-not-in", {{b_->Char('"'), Ref(first)}});
}

}  // namespace vls::grammar::json_schema_internal
