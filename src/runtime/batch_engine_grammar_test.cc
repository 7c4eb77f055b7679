// Structured output in the batch engine: a grammar over a test vocabulary on a tiny random model,
// sampled at temperature 1 with several seeds, so that the mask, not the model, makes the replies
// valid. Replies are checked by a recogniser written here (not the grammar matcher): every
// "stop" reply is in the language, every "length" reply a prefix of one; rows with and without a
// grammar in one batch give the tokens they give alone; speculative decoding (prompt lookup, the
// draft model) leaves greedy grammar replies unchanged.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "runtime/batch_engine.h"
#include "runtime/batch_engine_test_util.h"
#include "runtime/spec_test_util.h"

namespace vls {
namespace {

using grammar::CharClass;
using grammar::GrammarBuilder;
using grammar::Sequence;

constexpr int32_t kStopId = 300;  // a special token: the stop id of the open-ended language

// Token t writes kPieces[t % size], apart from the model's EOS ids and kStopId (special) and
// every 50th id (no bytes): the pieces mix tokens the grammars take, tokens that cross their
// boundaries, and tokens they never take.
const char* const kPieces[] = {"[",  "]",   ",",   "a",   "b",    "c",  "0",  "1",  "5",  "9",
                               "ab", "ca",  "12",  "345", "a,",   ",1", "[a", "1]", "]]", "x",
                               "[]", "bc,", "7,b", "cab", "9999", " ",  "\"", "{"};

std::shared_ptr<const grammar::TokenVocab> TestVocab(const LoadedModel& lm) {
  auto v = std::make_shared<grammar::TokenVocab>();
  const int32_t V = lm.config().vocab;
  v->bytes.resize(static_cast<size_t>(V));
  v->usable.assign(static_cast<size_t>(V), 1);
  const size_t n = sizeof(kPieces) / sizeof(kPieces[0]);
  for (int32_t t = 0; t < V; ++t)
    v->bytes[static_cast<size_t>(t)] = kPieces[static_cast<size_t>(t) % n];
  auto off = [&](int32_t t) {
    v->bytes[static_cast<size_t>(t)].clear();
    v->usable[static_cast<size_t>(t)] = 0;
  };
  for (int32_t t = 0; t < V; t += 50) off(t);
  for (int32_t t : lm.config().eos_token_ids) off(t);
  off(kStopId);
  return v;
}

CharClass Range(uint32_t lo, uint32_t hi) { return CharClass{{{lo, hi}}}; }

// L1 = "[" (item ("," item)*)? "]", item = [abc]+ | [0-9]{1,3}: ends by itself at "]".
grammar::Grammar ListGrammar() {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t alpha = b.Repeat("alpha", {b.Chars(Range('a', 'c'))}, 1, -1);
  const int32_t num = b.Repeat("num", {b.Chars(Range('0', '9'))}, 1, 3);
  const int32_t item = b.AddRule("item");
  b.SetAlternatives(item, {{b.Ref(alpha)}, {b.Ref(num)}});
  const int32_t rest = b.Repeat("rest", {b.Char(','), b.Ref(item)}, 0, -1);
  b.SetAlternatives(
      root, {{b.Char('['), b.Char(']')}, {b.Char('['), b.Ref(item), b.Ref(rest), b.Char(']')}});
  return std::move(b).Build(root);
}

// L2 = [abc]+: may end after any letter, never must (an end token ends it).
grammar::Grammar LettersGrammar() {
  GrammarBuilder b;
  const int32_t root = b.Repeat("letters", {b.Chars(Range('a', 'c'))}, 1, -1);
  return std::move(b).Build(root);
}

// Needs a 'z', which no token writes: no token is ever allowed.
grammar::Grammar ImpossibleGrammar() {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  b.SetAlternatives(root, {{b.Char('z')}});
  return std::move(b).Build(root);
}

std::shared_ptr<const grammar::CompiledGrammar> Compile(
    const grammar::Grammar& g, std::shared_ptr<const grammar::TokenVocab> v) {
  auto c = grammar::CompiledGrammar::Compile(g, std::move(v), grammar::GrammarLimits{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : nullptr;
}

// The recogniser of L1, written out as its automaton. Complete: a sentence; else a prefix.
enum class Verdict { kNo, kPrefix, kComplete };
Verdict RecogniseList(const std::string& s) {
  // 0 start, 1 after '[', 2 in letters, 3..5 in 1..3 digits, 6 after ',', 7 after ']'.
  int st = 0;
  for (char c : s) {
    const bool letter = c >= 'a' && c <= 'c', digit = c >= '0' && c <= '9';
    int next = -1;
    switch (st) {
      case 0: next = c == '[' ? 1 : -1; break;
      case 1: next = c == ']' ? 7 : letter ? 2 : digit ? 3 : -1; break;
      case 2: next = letter ? 2 : c == ',' ? 6 : c == ']' ? 7 : -1; break;
      case 3:
      case 4:
      case 5: next = digit && st < 5 ? st + 1 : c == ',' ? 6 : c == ']' ? 7 : -1; break;
      case 6: next = letter ? 2 : digit ? 3 : -1; break;
      default: break;
    }
    if (next < 0) return Verdict::kNo;
    st = next;
  }
  return st == 7 ? Verdict::kComplete : Verdict::kPrefix;
}

std::string Decode(const grammar::TokenVocab& v, const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s += v.bytes[static_cast<size_t>(t)];
  return s;
}

GenerationRequest GrammarRequest(std::vector<int32_t> prompt, int max_new,
                                 std::shared_ptr<const grammar::CompiledGrammar> g,
                                 float temperature, uint64_t seed) {
  GenerationRequest r = vls::Text(std::move(prompt), 0, max_new);
  r.ignore_eos = false;
  r.grammar = std::move(g);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

TEST(BatchEngineGrammarTest, SampledRepliesAreInTheLanguage) {
  auto lm = LoadModel("grammar_sampled", 4, 64);
  ASSERT_TRUE(lm);
  auto vocab = TestVocab(*lm);
  auto list = Compile(ListGrammar(), vocab);
  ASSERT_TRUE(list);
  std::vector<GenerationRequest> reqs;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    // Short limits cut some replies: those must be prefixes.
    reqs.push_back(GrammarRequest({3, 5, static_cast<int32_t>(7 + seed)}, seed % 3 == 0 ? 4 : 40,
                                  list, 1.0f, seed));
  }
  const Result run = RunAll(*lm, reqs);
  int stops = 0, lengths = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Outcome& o = run.by_id.at(run.ids[i]);
    const std::string text = Decode(*vocab, o.tokens);
    if (o.finish == FinishReason::kStop) {
      ++stops;
      EXPECT_EQ(RecogniseList(text), Verdict::kComplete) << "seed " << i + 1 << ": " << text;
    } else {
      ASSERT_EQ(o.finish, FinishReason::kLength) << "seed " << i + 1;
      ++lengths;
      EXPECT_NE(RecogniseList(text), Verdict::kNo) << "seed " << i + 1 << ": " << text;
      EXPECT_EQ(static_cast<int>(o.tokens.size()), reqs[i].max_new_tokens);
    }
    EXPECT_EQ(o.finish_events, 1);
  }
  EXPECT_GT(stops, 0);
  EXPECT_GT(lengths, 0);
  EXPECT_GT(run.counters.grammar_masks, 0u);
}

TEST(BatchEngineGrammarTest, EndTokensOnlyWhereTheGrammarMayEnd) {
  auto lm = LoadModel("grammar_end", 2, 64);
  ASSERT_TRUE(lm);
  auto vocab = TestVocab(*lm);
  auto letters = Compile(LettersGrammar(), vocab);
  ASSERT_TRUE(letters);
  std::vector<GenerationRequest> reqs;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    GenerationRequest r = GrammarRequest({9, 4}, 30, letters, 1.0f, seed);
    r.stop_token_ids = {kStopId};
    // Without the mask the stop id would be the first token every time.
    r.sampling.logit_bias = {{kStopId, 40.0f}};
    reqs.push_back(std::move(r));
  }
  const Result run = RunAll(*lm, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Outcome& o = run.by_id.at(run.ids[i]);
    ASSERT_EQ(o.finish, FinishReason::kStop) << i;
    ASSERT_GE(o.tokens.size(), 2u) << i;
    EXPECT_EQ(o.tokens.back(), kStopId);
    const std::string text =
        Decode(*vocab, std::vector<int32_t>(o.tokens.begin(), o.tokens.end() - 1));
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text.find_first_not_of("abc"), std::string::npos) << text;
  }
}

TEST(BatchEngineGrammarTest, MixedBatchRowsGiveTheirTokensAlone) {
  auto lm = LoadModel("grammar_mixed", 4, 64);
  ASSERT_TRUE(lm);
  auto vocab = TestVocab(*lm);
  auto list = Compile(ListGrammar(), vocab);
  auto letters = Compile(LettersGrammar(), vocab);
  ASSERT_TRUE(list && letters);
  std::vector<GenerationRequest> reqs;
  reqs.push_back(GrammarRequest({1, 2, 3}, 20, list, 0.0f, 1));
  reqs.push_back(vls::Text({4, 5, 6, 7}, 0, 20));  // free text
  reqs.push_back(GrammarRequest({8, 9}, 20, letters, 0.0f, 2));
  reqs.push_back(GrammarRequest({10, 11, 12}, 20, list, 1.0f, 3));
  reqs.push_back(vls::Text({13, 14}, 1, 20));  // queued behind the others
  const Result all = RunAll(*lm, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result one = RunAll(*lm, {reqs[i]});
    EXPECT_EQ(all.by_id.at(all.ids[i]).tokens, one.by_id.at(one.ids[0]).tokens) << i;
    EXPECT_EQ(all.by_id.at(all.ids[i]).finish, one.by_id.at(one.ids[0]).finish) << i;
  }
  // The free rows are the plain greedy chain.
  EXPECT_EQ(all.by_id.at(all.ids[1]).tokens, GreedyAlone(*lm, reqs[1]));
  // The grammar rows are constrained: replies in (or on the way into) their languages.
  for (size_t i : {0, 3}) {
    const Outcome& o = all.by_id.at(all.ids[i]);
    EXPECT_NE(o.finish, FinishReason::kError) << i;
    EXPECT_FALSE(o.tokens.empty()) << i;
    EXPECT_NE(RecogniseList(Decode(*vocab, o.tokens)), Verdict::kNo) << i;
  }
  EXPECT_EQ(all.by_id.at(all.ids[2]).tokens.size(), 20u);
  EXPECT_EQ(Decode(*vocab, all.by_id.at(all.ids[2]).tokens).find_first_not_of("abc"),
            std::string::npos);
}

TEST(BatchEngineGrammarTest, AGrammarWithNoTokenFailsAloneAndAnEmptyOneStops) {
  auto lm = LoadModel("grammar_fail", 3, 64);
  ASSERT_TRUE(lm);
  auto vocab = TestVocab(*lm);
  auto impossible = Compile(ImpossibleGrammar(), vocab);
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  b.SetAlternatives(root, {Sequence{}});
  auto empty = Compile(std::move(b).Build(root), vocab);
  auto list = Compile(ListGrammar(), vocab);
  ASSERT_TRUE(impossible && empty && list);
  std::vector<TokenEvent> finishes;
  BatchEngine e(*lm, [&](const TokenEvent& ev) {
    if (ev.finish != FinishReason::kNone) finishes.push_back(ev);
    return true;
  });
  const uint64_t bad = e.Submit(GrammarRequest({1, 2}, 10, impossible, 1.0f, 1)).value();
  const uint64_t none = e.Submit(GrammarRequest({1, 2}, 10, empty, 1.0f, 1)).value();
  const uint64_t good = e.Submit(GrammarRequest({1, 2}, 40, list, 1.0f, 1)).value();
  e.RunUntilIdle();
  std::map<uint64_t, TokenEvent> by;
  for (const TokenEvent& ev : finishes) by[ev.request_id] = ev;
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[bad].finish, FinishReason::kError);
  EXPECT_NE(by[bad].error.find("allows no token"), std::string::npos) << by[bad].error;
  EXPECT_EQ(by[none].finish, FinishReason::kStop);
  EXPECT_EQ(by[none].token, -1);
  EXPECT_EQ(by[none].generated_tokens, 0);
  EXPECT_NE(by[good].finish, FinishReason::kError);
}

// Greedy grammar replies with speculation equal those without: drafts cut where the grammar
// refuses them, each verified row under the mask after the drafts before it, rejected drafts
// never left in the grammar's state.
void ExpectSpeculationParity(const LoadedModel& lm, const EngineOptions& spec, bool expect_accept) {
  auto vocab = TestVocab(lm);
  auto list = Compile(ListGrammar(), vocab);
  auto letters = Compile(LettersGrammar(), vocab);
  ASSERT_TRUE(list && letters);
  std::vector<GenerationRequest> reqs;
  // Prompts of tokens the grammar takes, so lookup drafts find continuations.
  reqs.push_back(GrammarRequest({1, 3, 4, 2, 1, 3, 4, 2, 1, 3}, 30, list, 0.0f, 1));
  reqs.push_back(GrammarRequest({3, 4, 5, 3, 4, 5, 3, 4}, 30, letters, 0.0f, 2));
  reqs.push_back(GrammarRequest({1, 7, 8, 2, 1, 7}, 30, list, 0.0f, 3));
  reqs.push_back(vls::Text({5, 6, 5, 6, 5}, 0, 30));
  const Result plain = RunAll(lm, reqs);
  const Result fast = RunAll(lm, reqs, spec);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Outcome& o = fast.by_id.at(fast.ids[i]);
    EXPECT_EQ(o.tokens, plain.by_id.at(plain.ids[i]).tokens) << i;
    EXPECT_EQ(o.finish, plain.by_id.at(plain.ids[i]).finish) << i;
    EXPECT_NE(o.finish, FinishReason::kError) << i;
    EXPECT_FALSE(o.tokens.empty()) << i;
    if (reqs[i].grammar == list) {
      EXPECT_NE(RecogniseList(Decode(*vocab, o.tokens)), Verdict::kNo) << i;
    }
  }
  EXPECT_GT(fast.counters.verify_passes, 0u);
  if (expect_accept) {
    EXPECT_GT(fast.counters.accepted_draft_tokens, 0u);
  }
}

TEST(BatchEngineGrammarTest, PromptLookupLeavesGreedyRepliesUnchanged) {
  auto lm = LoadModel("grammar_spec", 4, 96, kernels::Precision::kF32, /*tied=*/true);
  ASSERT_TRUE(lm);
  EngineOptions o;
  o.speculative = Spec(4);
  ExpectSpeculationParity(*lm, o, false);
}

TEST(BatchEngineGrammarTest, DraftModelLeavesGreedyRepliesUnchanged) {
  auto lm = LoadModel("grammar_draft", 4, 96);
  ASSERT_TRUE(lm);
  EngineOptions o;
  o.speculative = Spec(4, DraftSource::kModel);
  o.draft_model = lm.get();  // the target drafts its unconstrained argmax: cut by the grammar
  ExpectSpeculationParity(*lm, o, true);
}

}  // namespace
}  // namespace vls
