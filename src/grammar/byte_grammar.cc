#include "grammar/byte_grammar.h"

#include <map>
#include <string>

namespace vls::grammar {
namespace {

using Alternatives = std::vector<std::vector<int32_t>>;

// Alternatives of a rule that start with the same element become one alternative: that element
// and then a new rule holding their tails (A ::= x B | x C  =>  A ::= x A' ; A' ::= B | C),
// repeated in the new rules. The language is the same; a large enum of literals becomes a trie,
// so a state holds one stack per distinct next byte instead of one per member.
void LeftFactor(std::vector<Alternatives>* rules) {
  std::vector<size_t> work(rules->size());
  for (size_t r = 0; r < work.size(); ++r) work[r] = r;
  while (!work.empty()) {
    const size_t r = work.back();
    work.pop_back();
    if ((*rules)[r].size() < 2) continue;
    Alternatives in = std::move((*rules)[r]);
    std::vector<int32_t> firsts;  // in order of first appearance
    std::map<int32_t, std::vector<size_t>> groups;
    for (size_t a = 0; a < in.size(); ++a) {
      if (in[a].empty()) continue;
      auto [it, inserted] = groups.try_emplace(in[a][0]);
      if (inserted) firsts.push_back(in[a][0]);
      it->second.push_back(a);
    }
    Alternatives out;
    bool empty_kept = false;
    for (const std::vector<int32_t>& alt : in) {
      if (alt.empty() && !empty_kept) {
        out.push_back(alt);
        empty_kept = true;
      }
    }
    for (int32_t first : firsts) {
      const std::vector<size_t>& members = groups[first];
      if (members.size() == 1) {
        out.push_back(std::move(in[members[0]]));
        continue;
      }
      Alternatives tails;
      for (size_t a : members) tails.emplace_back(in[a].begin() + 1, in[a].end());
      const size_t tail_rule = rules->size();
      rules->push_back(std::move(tails));
      out.push_back({first, ByteGrammar::RuleCode(static_cast<int32_t>(tail_rule))});
      work.push_back(tail_rule);
    }
    (*rules)[r] = std::move(out);
  }
}

}  // namespace

StatusOr<ByteGrammar> LowerToBytes(const Grammar& g, const GrammarLimits& limits) {
  ByteGrammar out;
  const auto source_rules = static_cast<int32_t>(g.rules.size());
  out.source_rules = source_rules;
  out.root = g.root;
  if (g.root < 0 || g.root >= source_rules) {
    return InvalidArgument("grammar: the root rule " + std::to_string(g.root) + " does not exist");
  }
  for (const Rule& rule : g.rules) {
    if (rule.alternatives.empty()) {
      return InvalidArgument("grammar: rule '" + rule.name + "' has no alternatives");
    }
    for (const Sequence& seq : rule.alternatives) {
      for (const Element& e : seq) {
        const size_t n = e.kind == Element::Kind::kRule ? g.rules.size() : g.classes.size();
        if (e.index < 0 || static_cast<size_t>(e.index) >= n) {
          return InvalidArgument("grammar: rule '" + rule.name + "' refers to a missing " +
                                 (e.kind == Element::Kind::kRule ? "rule" : "class"));
        }
      }
    }
  }
  std::map<ByteSet, int32_t> set_ids;
  auto set_id = [&](const ByteSet& s) {
    auto [it, inserted] = set_ids.emplace(s, static_cast<int32_t>(out.sets.size()));
    if (inserted) out.sets.push_back(s);
    return it->second;
  };
  // Each class: its sequences, and the rule standing for it when there are several.
  std::vector<std::vector<ByteSequence>> class_seqs(g.classes.size());
  std::vector<int32_t> class_rule(g.classes.size(), -1);
  int32_t next_rule = source_rules;
  for (size_t c = 0; c < g.classes.size(); ++c) {
    class_seqs[c] = Utf8Sequences(g.classes[c]);
    if (class_seqs[c].size() != 1) class_rule[c] = next_rule++;
  }
  const size_t max_positions = limits.max_elements * 4 + 1024;
  std::vector<Alternatives> alts(static_cast<size_t>(next_rule));
  size_t positions = 0;
  for (int32_t r = 0; r < source_rules; ++r) {
    for (const Sequence& seq : g.rules[static_cast<size_t>(r)].alternatives) {
      std::vector<int32_t> codes;
      for (const Element& e : seq) {
        if (e.kind == Element::Kind::kRule) {
          codes.push_back(ByteGrammar::RuleCode(e.index));
          continue;
        }
        const auto c = static_cast<size_t>(e.index);
        if (class_rule[c] >= 0) {
          codes.push_back(ByteGrammar::RuleCode(class_rule[c]));
        } else {
          for (const ByteSet& s : class_seqs[c][0]) codes.push_back(set_id(s));
        }
      }
      positions += codes.size() + 1;
      alts[static_cast<size_t>(r)].push_back(std::move(codes));
    }
    if (positions > max_positions) {
      return ResourceExhausted("grammar: lowered to bytes, the grammar has more than " +
                               std::to_string(max_positions) + " positions");
    }
  }
  for (size_t c = 0; c < g.classes.size(); ++c) {
    if (class_rule[c] < 0) continue;
    auto& rule_alts = alts[static_cast<size_t>(class_rule[c])];
    for (const ByteSequence& seq : class_seqs[c]) {
      std::vector<int32_t> codes;
      for (const ByteSet& s : seq) codes.push_back(set_id(s));
      positions += codes.size() + 1;
      rule_alts.push_back(std::move(codes));
    }
    // An empty class matches nothing: an alternative that can never start.
    if (rule_alts.empty()) rule_alts.push_back({set_id(ByteSet{})});
    if (positions > max_positions) {
      return ResourceExhausted("grammar: lowered to bytes, the grammar has more than " +
                               std::to_string(max_positions) + " positions");
    }
  }
  LeftFactor(&alts);
  next_rule = static_cast<int32_t>(alts.size());
  out.alt_begin.push_back(0);
  for (int32_t r = 0; r < next_rule; ++r) {
    for (const std::vector<int32_t>& codes : alts[static_cast<size_t>(r)]) {
      out.alt_starts.push_back(static_cast<int32_t>(out.elems.size()));
      for (int32_t code : codes) {
        out.elems.push_back(code);
        out.rule_of.push_back(r);
      }
      out.elems.push_back(ByteGrammar::kEnd);
      out.rule_of.push_back(r);
    }
    out.alt_begin.push_back(static_cast<int32_t>(out.alt_starts.size()));
  }
  return out;
}

}  // namespace vls::grammar
