// The grammar builder and character-class algebra (ValidateGrammar and PrintGbnf live in
// grammar_check.cc).
#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>

namespace vls::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

// Decodes one UTF-8 character at text[*i]; U+FFFD (one byte consumed) for anything invalid.
uint32_t NextCodepoint(std::string_view text, size_t* i) {
  uint32_t cp = 0;
  const int len = DecodeUtf8(text, *i, &cp);
  if (len == 0) {
    ++*i;
    return 0xFFFD;
  }
  *i += static_cast<size_t>(len);
  return cp;
}

}  // namespace

int DecodeUtf8(std::string_view text, size_t at, uint32_t* cp) {
  if (at >= text.size()) return 0;
  const auto b0 = static_cast<unsigned char>(text[at]);
  int len = 0;
  uint32_t v = 0;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    v = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    v = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    v = b0 & 0x07;
  } else {
    return 0;
  }
  if (at + static_cast<size_t>(len) > text.size()) return 0;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[at + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[len] || v > kMaxCodepoint || (v >= kSurrogateLo && v <= kSurrogateHi)) return 0;
  *cp = v;
  return len;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void Normalize(CharClass* c) {
  std::vector<CodepointRange> in;
  in.reserve(c->ranges.size() + 1);
  for (CodepointRange r : c->ranges) {
    if (r.lo > r.hi || r.lo > kMaxCodepoint) continue;
    r.hi = std::min(r.hi, kMaxCodepoint);
    // Cut the surrogates out.
    if (r.lo <= kSurrogateHi && r.hi >= kSurrogateLo) {
      if (r.lo < kSurrogateLo) in.push_back({r.lo, kSurrogateLo - 1});
      if (r.hi > kSurrogateHi) in.push_back({kSurrogateHi + 1, r.hi});
      continue;
    }
    in.push_back(r);
  }
  std::sort(in.begin(), in.end(), [](const CodepointRange& a, const CodepointRange& b) {
    return a.lo < b.lo || (a.lo == b.lo && a.hi < b.hi);
  });
  std::vector<CodepointRange> out;
  for (const CodepointRange& r : in) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  c->ranges = std::move(out);
}

CharClass Complement(const CharClass& c) {
  CharClass n = c;
  Normalize(&n);
  CharClass out;
  uint32_t next = 0;
  for (const CodepointRange& r : n.ranges) {
    if (r.lo > next) out.ranges.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.ranges.push_back({next, kMaxCodepoint});
  Normalize(&out);
  return out;
}

bool Contains(const CharClass& c, uint32_t cp) {
  auto it = std::upper_bound(c.ranges.begin(), c.ranges.end(), cp,
                             [](uint32_t v, const CodepointRange& r) { return v < r.lo; });
  if (it == c.ranges.begin()) return false;
  --it;
  return cp <= it->hi;
}

int32_t GrammarBuilder::AddRule(std::string_view name) {
  std::string unique(name);
  for (int n = 1; FindRule(unique) >= 0; ++n) {
    unique = std::string(name) + "-" + std::to_string(n);
  }
  const auto id = static_cast<int32_t>(grammar_.rules.size());
  names_.emplace(unique, id);
  grammar_.rules.push_back(Rule{std::move(unique), {}});
  return id;
}

int32_t GrammarBuilder::FindRule(std::string_view name) const {
  auto it = names_.find(std::string(name));
  return it == names_.end() ? -1 : it->second;
}

void GrammarBuilder::SetAlternatives(int32_t rule, std::vector<Sequence> alternatives) {
  grammar_.rules[static_cast<size_t>(rule)].alternatives = std::move(alternatives);
}

Element GrammarBuilder::Chars(CharClass c) {
  Normalize(&c);
  std::vector<std::pair<uint32_t, uint32_t>> key;
  key.reserve(c.ranges.size());
  for (const CodepointRange& r : c.ranges) key.emplace_back(r.lo, r.hi);
  auto [it, inserted] =
      class_ids_.emplace(std::move(key), static_cast<int32_t>(grammar_.classes.size()));
  if (inserted) grammar_.classes.push_back(std::move(c));
  return Element{Element::Kind::kChars, it->second};
}

Element GrammarBuilder::Char(uint32_t cp) { return Chars(CharClass{{{cp, cp}}}); }

Sequence GrammarBuilder::Literal(std::string_view utf8) {
  Sequence s;
  size_t i = 0;
  while (i < utf8.size()) s.push_back(Char(NextCodepoint(utf8, &i)));
  return s;
}

int32_t GrammarBuilder::Repeat(std::string_view base, const Sequence& x, int min, int max) {
  // tail*: T ::= x T | ε.  x{0,k}: O_k ::= x O_{k-1} | ε (nested, so no ambiguity).
  const int32_t rule = AddRule(std::string(base) + "-rep");
  Sequence seq;
  for (int i = 0; i < min; ++i) seq.insert(seq.end(), x.begin(), x.end());
  if (max < 0) {
    const int32_t star = AddRule(std::string(base) + "-star");
    Sequence loop = x;
    loop.push_back(Ref(star));
    SetAlternatives(star, {loop, Sequence{}});
    seq.push_back(Ref(star));
  } else if (max > min) {
    int32_t inner = -1;
    for (int k = 0; k < max - min; ++k) {
      const int32_t opt = AddRule(std::string(base) + "-opt");
      Sequence some = x;
      if (inner >= 0) some.push_back(Ref(inner));
      SetAlternatives(opt, {some, Sequence{}});
      inner = opt;
    }
    seq.push_back(Ref(inner));
  }
  SetAlternatives(rule, {seq});
  return rule;
}

size_t GrammarBuilder::element_count() const {
  size_t n = 0;
  for (const Rule& r : grammar_.rules) {
    for (const Sequence& s : r.alternatives) n += s.size();
  }
  return n;
}

Grammar GrammarBuilder::Build(int32_t root) && {
  grammar_.root = root;
  return std::move(grammar_);
}

}  // namespace vls::grammar
