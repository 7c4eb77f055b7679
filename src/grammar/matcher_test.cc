#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "grammar/byte_grammar.h"
#include "grammar/byte_stacks.h"
#include "grammar/mask_cache.h"
#include "grammar/utf8_lowering.h"

namespace vls::grammar {
namespace {

std::string Utf8(uint32_t cp) {
  uint8_t b[4];
  const int n = EncodeUtf8(cp, b);
  return std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

// A plain Earley recogniser over code points: the reference the matcher is checked against.
// Assumes every rule is productive and every class non-empty (RandomGrammar makes them so), so
// a non-empty last set means the prefix extends to a sentence.
class Earley {
 public:
  explicit Earley(const Grammar& g) : g_(g), nullable_(g.rules.size(), false) {
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g.rules.size(); ++r) {
        if (nullable_[r]) continue;
        for (const Sequence& s : g.rules[r].alternatives) {
          bool all = true;
          for (const Element& e : s) {
            all = all && e.kind == Element::Kind::kRule && nullable_[static_cast<size_t>(e.index)];
          }
          if (all) {
            nullable_[r] = true;
            changed = true;
          }
        }
      }
    }
  }

  struct Result {
    bool viable = false;
    bool complete = false;
    bool can_continue = false;
  };

  Result Run(const std::vector<uint32_t>& text) const {
    using Item = std::tuple<int, int, int, int>;  // rule, alternative, dot, origin
    std::vector<std::vector<Item>> sets(text.size() + 1);
    std::vector<std::set<Item>> seen(text.size() + 1);
    auto add = [&](size_t i, Item it) {
      if (seen[i].insert(it).second) sets[i].push_back(it);
    };
    for (int a = 0;
         a < static_cast<int>(g_.rules[static_cast<size_t>(g_.root)].alternatives.size()); ++a) {
      add(0, {g_.root, a, 0, 0});
    }
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t k = 0; k < sets[i].size(); ++k) {
        const auto [r, a, dot, origin] = sets[i][k];
        const Sequence& seq = g_.rules[static_cast<size_t>(r)].alternatives[static_cast<size_t>(a)];
        if (dot == static_cast<int>(seq.size())) {
          for (size_t j = 0; j < sets[static_cast<size_t>(origin)].size(); ++j) {
            const auto [r2, a2, d2, o2] = sets[static_cast<size_t>(origin)][j];
            const Sequence& s2 =
                g_.rules[static_cast<size_t>(r2)].alternatives[static_cast<size_t>(a2)];
            if (d2 < static_cast<int>(s2.size()) &&
                s2[static_cast<size_t>(d2)].kind == Element::Kind::kRule &&
                s2[static_cast<size_t>(d2)].index == r) {
              add(i, {r2, a2, d2 + 1, o2});
            }
          }
          continue;
        }
        const Element& e = seq[static_cast<size_t>(dot)];
        if (e.kind == Element::Kind::kRule) {
          const auto& alts = g_.rules[static_cast<size_t>(e.index)].alternatives;
          for (int a2 = 0; a2 < static_cast<int>(alts.size()); ++a2) {
            add(i, {e.index, a2, 0, static_cast<int>(i)});
          }
          if (nullable_[static_cast<size_t>(e.index)]) add(i, {r, a, dot + 1, origin});
        } else if (i < text.size() && Contains(g_.classes[static_cast<size_t>(e.index)], text[i])) {
          add(i + 1, {r, a, dot + 1, origin});
        }
      }
    }
    Result res;
    const auto& last = sets.back();
    res.viable = !last.empty();
    for (const auto& [r, a, dot, origin] : last) {
      const Sequence& seq = g_.rules[static_cast<size_t>(r)].alternatives[static_cast<size_t>(a)];
      if (dot == static_cast<int>(seq.size())) {
        res.complete = res.complete || (r == g_.root && origin == 0);
      } else if (seq[static_cast<size_t>(dot)].kind == Element::Kind::kChars) {
        res.can_continue = true;
      }
    }
    return res;
  }

 private:
  const Grammar& g_;
  std::vector<bool> nullable_;
};

// Whether running `bytes` passes the stack bound (kMaxStacks, kMaxClosureWork) on the way.
bool PassesStackBound(const Grammar& g, const std::string& bytes) {
  auto lowered = LowerToBytes(g, GrammarLimits{});
  EXPECT_TRUE(lowered.ok());
  StackEngine engine(&*lowered);
  std::vector<Frame> arena;
  StackSet cur;
  StackSet next;
  engine.Start(lowered->root, kBottom, &arena, &cur);
  for (char c : bytes) {
    engine.Advance(cur.tops, static_cast<uint8_t>(c), &arena, &next);
    if (next.overflow) return true;
    std::swap(cur, next);
  }
  return false;
}

const uint32_t kAlphabet[] = {'a', 'b', 'c', '{', '}', 0xE9, 0x4E2D, 0x1F600};

// Rules reference higher-numbered rules anywhere and any rule only after a character, so there
// is no left recursion; each rule's first alternative references higher rules only, so every
// rule is productive.
Grammar RandomGrammar(std::mt19937* rng) {
  GrammarBuilder b;
  const int n = 2 + static_cast<int>((*rng)() % 5);
  for (int r = 0; r < n; ++r) b.AddRule("r" + std::to_string(r));
  auto random_class = [&]() {
    switch ((*rng)() % 6) {
      case 0: return b.Chars(CharClass{{{'a', 'c'}}});
      case 1: return b.Chars(CharClass{{{0xE0, 0xFF}, {0x4E00, 0x4FFF}}});
      case 2: return b.Chars(Complement(CharClass{{{'a', 'a'}}}));
      default: return b.Char(kAlphabet[(*rng)() % std::size(kAlphabet)]);
    }
  };
  for (int r = 0; r < n; ++r) {
    std::vector<Sequence> alts;
    const int na = 1 + static_cast<int>((*rng)() % 3);
    for (int a = 0; a < na; ++a) {
      Sequence s;
      const int len = static_cast<int>((*rng)() % 5);
      bool after_char = false;
      for (int k = 0; k < len; ++k) {
        const bool ref = (*rng)() % 3 == 0;
        if (ref && a > 0 && after_char) {
          s.push_back(b.Ref(static_cast<int32_t>((*rng)() % static_cast<unsigned>(n))));
        } else if (ref && r + 1 < n) {
          s.push_back(
              b.Ref(r + 1 + static_cast<int32_t>((*rng)() % static_cast<unsigned>(n - r - 1))));
        } else {
          s.push_back(random_class());
          after_char = true;
        }
      }
      alts.push_back(std::move(s));
    }
    b.SetAlternatives(r, std::move(alts));
  }
  return std::move(b).Build(0);
}

uint32_t RandomMember(const CharClass& c, std::mt19937* rng) {
  std::vector<uint32_t> picks;
  for (uint32_t cp : kAlphabet) {
    if (Contains(c, cp)) picks.push_back(cp);
  }
  if (picks.empty() || (*rng)() % 4 == 0) {
    const CodepointRange& r = c.ranges[(*rng)() % c.ranges.size()];
    return r.lo + static_cast<uint32_t>((*rng)() % (std::min<uint32_t>(r.hi - r.lo, 1000) + 1));
  }
  return picks[(*rng)() % picks.size()];
}

void Derive(const Grammar& g, int32_t rule, int depth, std::mt19937* rng,
            std::vector<uint32_t>* out) {
  const auto& alts = g.rules[static_cast<size_t>(rule)].alternatives;
  const size_t a = depth > 6 ? 0 : (*rng)() % alts.size();
  for (const Element& e : alts[a]) {
    if (e.kind == Element::Kind::kRule) {
      Derive(g, e.index, depth + 1, rng, out);
    } else {
      out->push_back(RandomMember(g.classes[static_cast<size_t>(e.index)], rng));
    }
  }
}

std::shared_ptr<const TokenVocab> RandomVocab(std::mt19937* rng) {
  auto v = std::make_shared<TokenVocab>();
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int pieces = 1 + static_cast<int>((*rng)() % 3);
    for (int k = 0; k < pieces; ++k) {
      const std::string c = Utf8(kAlphabet[(*rng)() % std::size(kAlphabet)]);
      switch ((*rng)() % 4) {
        case 0:  // a character's head
          t += c.substr(0, 1 + (*rng)() % c.size());
          break;
        case 1:  // a character's tail
          t += c.substr((*rng)() % c.size());
          break;
        default: t += c;
      }
    }
    v->bytes.push_back(t);
    v->usable.push_back((*rng)() % 20 == 0 ? 0 : 1);
  }
  v->bytes.emplace_back();  // an id without a token
  v->usable.push_back(0);
  v->bytes.emplace_back();  // an empty usable token is never allowed
  v->usable.push_back(1);
  return v;
}

std::shared_ptr<const CompiledGrammar> MustCompile(const Grammar& g,
                                                   std::shared_ptr<const TokenVocab> v) {
  auto c = CompiledGrammar::Compile(g, std::move(v), GrammarLimits{});
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << PrintGbnf(g);
  return c.ok() ? *c : nullptr;
}

TEST(GrammarMatcherTest, AgreesWithEarleyOnRandomStrings) {
  std::mt19937 rng(11);
  auto vocab = RandomVocab(&rng);
  int strings = 0;
  int bounded = 0;
  for (int gi = 0; gi < 150; ++gi) {
    const Grammar g = RandomGrammar(&rng);
    auto compiled = MustCompile(g, vocab);
    ASSERT_NE(compiled, nullptr);
    const Earley ref(g);
    for (int si = 0; si < 20; ++si) {
      std::vector<uint32_t> text;
      Derive(g, g.root, 0, &rng, &text);
      if (!text.empty() && rng() % 2 == 0) {
        text[rng() % text.size()] = kAlphabet[rng() % std::size(kAlphabet)];
      }
      if (rng() % 3 == 0) text.push_back(kAlphabet[rng() % std::size(kAlphabet)]);
      GrammarMatcher m(compiled);
      ++strings;
      std::string bytes;
      std::vector<uint32_t> prefix;
      for (size_t k = 0; k <= text.size(); ++k) {
        const Earley::Result want = ref.Run(prefix);
        ASSERT_TRUE(want.viable);
        ASSERT_EQ(m.CanEnd(), want.complete) << PrintGbnf(g) << " at " << k;
        ASSERT_EQ(m.MustEnd(), want.complete && !want.can_continue) << PrintGbnf(g);
        if (k == text.size()) break;
        prefix.push_back(text[k]);
        bytes += Utf8(text[k]);
        const bool viable = ref.Run(prefix).viable;
        const bool accepted = m.AcceptBytes(Utf8(text[k]));
        if (viable && !accepted && PassesStackBound(g, bytes)) {
          ++bounded;  // an ambiguous grammar met the bound: refused, documented
          break;
        }
        ASSERT_EQ(accepted, viable)
            << PrintGbnf(g) << " at " << k << " text " << ::testing::PrintToString(text);
        if (!viable) break;
      }
    }
  }
  // The random grammars are ambiguous at times; the bound cuts only a few strings short.
  EXPECT_LT(bounded * 10, strings);
}

// For every token: the mask bit == AcceptToken succeeds; then Rollback restores every mask.
// Run with the mask cache's default limit on uncertain tokens, with none (every entry goes
// down to the bottom of the stack), with a small one, with no memory for the cache and with
// walks cut short after a few states.
class MaskTest : public ::testing::TestWithParam<std::tuple<size_t, size_t, size_t>> {
 protected:
  void SetUp() override {
    SetUncertainLimitForTesting(std::get<0>(GetParam()));
    SetCacheBudgetForTesting(std::get<1>(GetParam()));
    SetWalkBudgetForTesting(std::get<2>(GetParam()));
  }
  void TearDown() override {
    SetUncertainLimitForTesting(kUncertainLimit);
    SetCacheBudgetForTesting(kMaxCacheBytes);
    SetWalkBudgetForTesting(kMaxWalkTops);
  }
};

INSTANTIATE_TEST_SUITE_P(CacheSettings, MaskTest,
                         ::testing::Values(std::make_tuple(kUncertainLimit, kMaxCacheBytes,
                                                           kMaxWalkTops),
                                           std::make_tuple(size_t{0}, kMaxCacheBytes, kMaxWalkTops),
                                           std::make_tuple(size_t{3}, kMaxCacheBytes, kMaxWalkTops),
                                           std::make_tuple(size_t{0}, size_t{0}, kMaxWalkTops),
                                           std::make_tuple(size_t{0}, kMaxCacheBytes, size_t{4})));

TEST_P(MaskTest, MaskEqualsAcceptTokenOnRandomWalks) {
  std::mt19937 rng(5);
  size_t total_allowed = 0;
  size_t total_steps = 0;
  for (int gi = 0; gi < 120; ++gi) {
    auto vocab = RandomVocab(&rng);
    const Grammar g = RandomGrammar(&rng);
    auto compiled = MustCompile(g, vocab);
    ASSERT_NE(compiled, nullptr);
    GrammarMatcher m(compiled);
    std::vector<std::vector<uint32_t>> masks;
    std::vector<bool> can_end;
    for (int step = 0; step < 12; ++step) {
      std::vector<uint32_t> mask(MaskWords(vocab->size()), 0xFFFFFFFFu);
      m.FillNextTokenMask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        const bool ok = m.AcceptToken(id);
        if (ok) {
          m.Rollback(1);
          allowed.push_back(id);
        }
        ASSERT_EQ(MaskAllows(mask, id), ok) << PrintGbnf(g) << " token " << id << " step " << step;
      }
      // Bits past the vocabulary stay clear.
      for (int32_t id = vocab->size(); id < static_cast<int32_t>(mask.size() * 32); ++id) {
        ASSERT_FALSE(MaskAllows(mask, id));
      }
      masks.push_back(mask);
      can_end.push_back(m.CanEnd());
      total_allowed += allowed.size();
      if (allowed.empty()) break;
      ++total_steps;
      ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
    }
    for (size_t k = masks.size(); k-- > 0;) {
      m.Rollback(m.steps() - static_cast<int>(k));
      ASSERT_EQ(m.steps(), static_cast<int>(k));
      std::vector<uint32_t> mask(MaskWords(vocab->size()));
      m.FillNextTokenMask(mask);
      ASSERT_EQ(mask, masks[k]) << "after rollback to step " << k;
      ASSERT_EQ(m.CanEnd(), can_end[k]);
    }
  }
  // The walks are not trivial: many tokens allowed, many steps taken.
  EXPECT_GT(total_allowed, 2000u);
  EXPECT_GT(total_steps, 300u);
}

// One compiled grammar shared by threads (its cache filling from all of them at once): every
// mask equals the one a grammar compiled for a single thread gives.
TEST(GrammarMatcherTest, SharedAcrossThreads) {
  std::mt19937 rng(3);
  for (int gi = 0; gi < 30; ++gi) {
    auto vocab = RandomVocab(&rng);
    const Grammar g = RandomGrammar(&rng);
    auto shared = MustCompile(g, vocab);
    auto alone = MustCompile(g, vocab);
    ASSERT_NE(shared, nullptr);
    ASSERT_NE(alone, nullptr);
    constexpr int kWalks = 8;
    std::vector<std::vector<int32_t>> walks(kWalks);
    std::vector<std::vector<std::vector<uint32_t>>> masks(kWalks);
    for (int w = 0; w < kWalks; ++w) {
      GrammarMatcher m(alone);
      for (int step = 0; step < 10; ++step) {
        std::vector<uint32_t> mask(MaskWords(vocab->size()));
        m.FillNextTokenMask(mask);
        masks[static_cast<size_t>(w)].push_back(mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (MaskAllows(mask, id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t id = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.AcceptToken(id));
        walks[static_cast<size_t>(w)].push_back(id);
      }
    }
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    threads.reserve(4);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int k = 0; k < kWalks; ++k) {
          const auto w = static_cast<size_t>((k + 3 * t) % kWalks);
          GrammarMatcher m(shared);
          for (size_t step = 0; step < masks[w].size(); ++step) {
            std::vector<uint32_t> mask(MaskWords(vocab->size()));
            m.FillNextTokenMask(mask);
            if (mask != masks[w][step]) mismatches.fetch_add(1);
            if (step < walks[w].size() && !m.AcceptToken(walks[w][step])) mismatches.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    ASSERT_EQ(mismatches.load(), 0) << PrintGbnf(g);
  }
}

}  // namespace
}  // namespace vls::grammar
