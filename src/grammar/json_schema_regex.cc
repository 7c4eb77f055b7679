// The regular-expression front end past parsing (json_schema_regex.h): repetitions of what can
// match empty are rewritten so that no rule is left-recursive, the size of the grammar is
// computed and checked against GrammarLimits, and only then are rules added, in the plain mode
// or in the JSON-string and search modes of JSON Schema's `pattern` and `format`.
#include "grammar/json_schema_regex.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vls::grammar {
namespace {

using Node = RegexNode;

Node CharsNode(CharClass c) { return RegexChars(std::move(c)); }
CharClass AnyClass() { return RegexAnyClass(); }

bool Nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kEmpty: return true;
    case Node::Kind::kChars: return false;
    case Node::Kind::kSeq: return std::all_of(n.kids.begin(), n.kids.end(), Nullable);
    case Node::Kind::kAlt: return std::any_of(n.kids.begin(), n.kids.end(), Nullable);
    case Node::Kind::kRepeat: return n.min == 0 || Nullable(n.kids[0]);
  }
  return true;
}

// Node count, for the copy budget.
size_t Size(const Node& n) {
  size_t s = 1;
  for (const Node& k : n.kids) s += Size(k);
  return s;
}

Status Spend(size_t n, size_t* budget) {
  if (n > *budget) {
    return ResourceExhausted(
        "regex: rewriting repetitions of empty-matching parts grows past "
        "the element limit");
  }
  *budget -= n;
  return Status::Ok();
}

// The non-empty strings of `n` (false in *any: none). Repeats below are already normalised (their
// child cannot match empty).
Status NonEmpty(const Node& n, Node* out, bool* any, size_t* budget) {
  *any = true;
  switch (n.kind) {
    case Node::Kind::kEmpty: *any = false; return Status::Ok();
    case Node::Kind::kChars: *out = n; return Spend(1, budget);
    case Node::Kind::kRepeat:
      VLS_RETURN_IF_ERROR(Spend(Size(n), budget));
      *out = n;
      if (out->min == 0) out->min = 1;
      if (out->max == 0) *any = false;
      return Status::Ok();
    case Node::Kind::kAlt: {
      Node alt;
      alt.kind = Node::Kind::kAlt;
      for (const Node& k : n.kids) {
        Node ne;
        bool some = false;
        VLS_RETURN_IF_ERROR(NonEmpty(k, &ne, &some, budget));
        if (some) alt.kids.push_back(std::move(ne));
      }
      *any = !alt.kids.empty();
      *out = std::move(alt);
      return Status::Ok();
    }
    case Node::Kind::kSeq: {
      // The first non-empty part is kids[i]; those before it match empty.
      Node alt;
      alt.kind = Node::Kind::kAlt;
      for (size_t i = 0; i < n.kids.size(); ++i) {
        Node ne;
        bool some = false;
        VLS_RETURN_IF_ERROR(NonEmpty(n.kids[i], &ne, &some, budget));
        if (some) {
          Node seq;
          seq.kind = Node::Kind::kSeq;
          seq.kids.push_back(std::move(ne));
          for (size_t j = i + 1; j < n.kids.size(); ++j) {
            VLS_RETURN_IF_ERROR(Spend(Size(n.kids[j]), budget));
            seq.kids.push_back(n.kids[j]);
          }
          alt.kids.push_back(std::move(seq));
        }
        if (!Nullable(n.kids[i])) break;
      }
      *any = !alt.kids.empty();
      *out = std::move(alt);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// Rewrites x{m,n} with x matching empty as (x without empty){0,n}, bottom-up, so that the
// builder's right-recursive repetition rules are never left-recursive.
Status NormaliseRepeats(Node* n, size_t* budget) {
  for (Node& k : n->kids) VLS_RETURN_IF_ERROR(NormaliseRepeats(&k, budget));
  if (n->kind != Node::Kind::kRepeat || !Nullable(n->kids[0])) return Status::Ok();
  Node ne;
  bool any = false;
  VLS_RETURN_IF_ERROR(NonEmpty(n->kids[0], &ne, &any, budget));
  if (!any || n->max == 0) {
    *n = Node{};
    return Status::Ok();
  }
  n->kids[0] = std::move(ne);
  n->min = 0;
  return Status::Ok();
}

// Upper bounds on what Emitter adds.
struct Cost {
  double elements = 0;
  double rules = 0;
  double inline_len = 0;  // elements in the sequence handed to the parent
};

bool NeedsJsonEscape(const CharClass& c) {
  return Contains(c, '"') || Contains(c, '\\') || Contains(c, '/') ||
         (!c.ranges.empty() && c.ranges[0].lo < 0x20);
}

Cost CostOf(const Node& n, const RegexMode& mode) {
  Cost c;
  switch (n.kind) {
    case Node::Kind::kEmpty: return c;
    case Node::Kind::kChars:
      c.inline_len = 1;
      c.elements = 1;
      if (mode.json_string && NeedsJsonEscape(n.chars)) {
        c.elements += 40;
        c.rules += 1;
      }
      return c;
    case Node::Kind::kSeq:
      for (const Node& k : n.kids) {
        const Cost kc = CostOf(k, mode);
        c.elements += kc.elements;
        c.rules += kc.rules;
        c.inline_len += kc.inline_len;
      }
      return c;
    case Node::Kind::kAlt:
      for (const Node& k : n.kids) {
        const Cost kc = CostOf(k, mode);
        c.elements += kc.elements;
        c.rules += kc.rules;
      }
      c.elements += 1;
      c.rules += 1;
      c.inline_len = 1;
      return c;
    case Node::Kind::kRepeat: {
      c = CostOf(n.kids[0], mode);
      c.elements += 1;
      c.rules += 1;  // the wrapper
      const double min = n.min;
      const double extra = n.max < 0 ? 1 : n.max - n.min;
      c.elements += min + 1 + 2 * extra;
      c.rules += 2 + extra;
      c.inline_len = 1;
      return c;
    }
  }
  return c;
}

class Emitter {
 public:
  Emitter(GrammarBuilder* b, std::string name, const RegexMode& mode)
      : b_(b), name_(std::move(name)), mode_(mode) {}

  Sequence Emit(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kEmpty: return {};
      case Node::Kind::kChars: return {CharsElement(n.chars)};
      case Node::Kind::kSeq: {
        Sequence s;
        for (const Node& k : n.kids) {
          Sequence ks = Emit(k);
          s.insert(s.end(), ks.begin(), ks.end());
        }
        return s;
      }
      case Node::Kind::kAlt: {
        const int32_t rule = b_->AddRule(name_ + "-alt");
        std::vector<Sequence> alts;
        alts.reserve(n.kids.size());
        for (const Node& k : n.kids) alts.push_back(Emit(k));
        b_->SetAlternatives(rule, std::move(alts));
        return {b_->Ref(rule)};
      }
      case Node::Kind::kRepeat: {
        Sequence x = Emit(n.kids[0]);
        if (n.min == 1 && n.max == 1) return x;
        if (x.size() != 1) {
          const int32_t group = b_->AddRule(name_ + "-group");
          b_->SetAlternatives(group, {std::move(x)});
          x = {b_->Ref(group)};
        }
        return {b_->Ref(b_->Repeat(name_, x, n.min, n.max))};
      }
    }
    return {};
  }

 private:
  Element CharsElement(const CharClass& c) {
    if (!mode_.json_string || !NeedsJsonEscape(c)) return b_->Chars(c);
    const int32_t rule = b_->AddRule(name_ + "-char");
    std::vector<Sequence> alts;
    // raw = c minus '"', '\\' and the controls: the complement of (not c) + those.
    CharClass not_raw = Complement(c);
    not_raw.ranges.insert(not_raw.ranges.end(), {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    Normalize(&not_raw);
    const CharClass raw = Complement(not_raw);
    if (!raw.ranges.empty()) alts.push_back({b_->Chars(raw)});
    auto escape = [&](char e) { alts.push_back({b_->Char('\\'), b_->Char(e)}); };
    if (Contains(c, '"')) escape('"');
    if (Contains(c, '\\')) escape('\\');
    if (Contains(c, '/')) escape('/');
    static constexpr std::pair<uint32_t, char> kShort[] = {
        {0x08, 'b'}, {0x0C, 'f'}, {0x0A, 'n'}, {0x0D, 'r'}, {0x09, 't'}};
    for (const auto& [cp, e] : kShort) {
      if (Contains(c, cp)) escape(e);
    }
    for (uint32_t high = 0; high < 2; ++high) {
      CharClass digits;
      for (uint32_t low = 0; low < 16; ++low) {
        if (!Contains(c, high * 16 + low)) continue;
        const char* hex = "0123456789abcdef";
        digits.ranges.push_back({static_cast<uint32_t>(hex[low]), static_cast<uint32_t>(hex[low])});
        if (low >= 10) {
          const uint32_t upper = static_cast<uint32_t>(hex[low]) - 'a' + 'A';
          digits.ranges.push_back({upper, upper});
        }
      }
      if (digits.ranges.empty()) continue;
      alts.push_back({b_->Char('\\'), b_->Char('u'), b_->Char('0'), b_->Char('0'),
                      b_->Char('0' + high), b_->Chars(std::move(digits))});
    }
    b_->SetAlternatives(rule, std::move(alts));
    return b_->Ref(rule);
  }

  GrammarBuilder* b_;
  std::string name_;
  RegexMode mode_;
};

}  // namespace

StatusOr<int32_t> AddRegexRuleWithMode(GrammarBuilder* builder, std::string_view pattern,
                                       std::string_view rule_name, const GrammarLimits& limits,
                                       const RegexMode& mode) {
  std::vector<Node> branches;
  std::vector<std::pair<bool, bool>> anchors;
  VLS_RETURN_IF_ERROR(ParseRegex(pattern, limits, &branches, &anchors));

  // In search mode an unanchored side may have any text beside it.
  Node root;
  root.kind = Node::Kind::kAlt;
  for (size_t k = 0; k < branches.size(); ++k) {
    if (!mode.search) {
      root.kids.push_back(std::move(branches[k]));
      continue;
    }
    Node any_text;
    any_text.kind = Node::Kind::kRepeat;
    any_text.min = 0;
    any_text.max = -1;
    any_text.kids.push_back(CharsNode(AnyClass()));
    Node seq;
    seq.kind = Node::Kind::kSeq;
    if (!anchors[k].first) seq.kids.push_back(any_text);
    seq.kids.push_back(std::move(branches[k]));
    if (!anchors[k].second) seq.kids.push_back(any_text);
    root.kids.push_back(std::move(seq));
  }
  if (root.kids.size() == 1) root = Node(root.kids[0]);

  size_t budget = limits.max_elements;
  VLS_RETURN_IF_ERROR(NormaliseRepeats(&root, &budget));

  const Cost cost = CostOf(root, mode);
  const double elements = cost.elements + cost.inline_len + builder->element_count();
  const double rules = cost.rules + 1 + builder->rule_count();
  if (elements > static_cast<double>(limits.max_elements)) {
    return ResourceExhausted(
        "regex: the pattern needs about " + std::to_string(static_cast<uint64_t>(elements)) +
        " grammar elements, over the limit of " + std::to_string(limits.max_elements));
  }
  if (rules > static_cast<double>(limits.max_rules)) {
    return ResourceExhausted(
        "regex: the pattern needs about " + std::to_string(static_cast<uint64_t>(rules)) +
        " grammar rules, over the limit of " + std::to_string(limits.max_rules));
  }
  const int32_t rule = builder->AddRule(rule_name);
  Emitter emitter(builder, std::string(rule_name), mode);
  Sequence body = emitter.Emit(root);
  builder->SetAlternatives(rule, {std::move(body)});
  return rule;
}

}  // namespace vls::grammar
