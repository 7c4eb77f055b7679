// Grammar matcher benchmark (issue 34): compile time and token-mask time per token over the real
// Qwen3 vocabulary (151,936 ids) for a nested JSON schema, GBNF grammars and a regex.
// usage: grammar_bench TOKENIZER_JSON [--walks N] [--steps N] [--seed S]
// Run from the repository root (reads bench/schemas/invoice.json and tests/grammar/gbnf/*.gbnf).
// For each grammar: compile = Compile (lowering, token trie) + the first FillNextTokenMask,
// best and median of 3; then mask times per step over documents of the language tokenized by
// the tokenizer and over random walks (uniform among allowed tokens), once on a fresh compiled
// grammar (cold: its mask cache fills as it goes) and once more on the same one (warm); and
// AcceptToken's time along the documents.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "tokenizer/tokenizer.h"

namespace {

using vls::grammar::CompiledGrammar;
using vls::grammar::Grammar;
using vls::grammar::GrammarLimits;
using vls::grammar::GrammarMatcher;
using vls::grammar::TokenVocab;
using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Stats {
  std::vector<double> us;
  void Print(const char* label) {
    if (us.empty()) {
      std::printf("  %-6s n=0\n", label);
      return;
    }
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double u : us) sum += u;
    auto q = [&](double f) {
      return us[std::min(us.size() - 1, static_cast<size_t>(f * us.size()))];
    };
    std::printf(
        "  %-6s n=%zu median_us=%.1f p90_us=%.1f p99_us=%.1f max_us=%.1f mean_us=%.1f "
        "total_ms=%.1f\n",
        label, us.size(), q(0.5), q(0.9), q(0.99), us.back(), sum / us.size(), sum / 1000.0);
  }
};

struct Case {
  std::string name;
  Grammar grammar;
  std::vector<std::string> docs;
};

void RunWalks(const std::shared_ptr<const CompiledGrammar>& cg, const vls::tok::Tokenizer& tok,
              const Case& c, int walks, int steps, uint32_t seed, Stats* doc_stats,
              Stats* walk_stats, Stats* accept_stats) {
  const TokenVocab& v = cg->vocab();
  std::vector<uint32_t> mask(vls::grammar::MaskWords(v.size()));
  for (const std::string& doc : c.docs) {
    auto ids = tok.Encode(doc);
    if (!ids.ok()) continue;
    GrammarMatcher m(cg);
    for (int32_t id : *ids) {
      const auto t0 = Clock::now();
      m.FillNextTokenMask(mask);
      doc_stats->us.push_back(Us(t0, Clock::now()));
      const auto t1 = Clock::now();
      const bool accepted = vls::grammar::MaskAllows(mask, id) && m.AcceptToken(id);
      accept_stats->us.push_back(Us(t1, Clock::now()));
      if (!accepted) {
        std::printf("  ERROR: %s: document token %d refused\n", c.name.c_str(), id);
        break;
      }
    }
    if (!m.CanEnd()) std::printf("  ERROR: %s: document cannot end\n", c.name.c_str());
  }
  std::mt19937 rng(seed);
  std::vector<int32_t> allowed;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(cg);
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      m.FillNextTokenMask(mask);
      walk_stats->us.push_back(Us(t0, Clock::now()));
      allowed.clear();
      for (size_t wd = 0; wd < mask.size(); ++wd) {
        for (uint32_t bits = mask[wd]; bits != 0; bits &= bits - 1) {
          allowed.push_back(
              static_cast<int32_t>(wd * 32 + static_cast<size_t>(__builtin_ctz(bits))));
        }
      }
      if (allowed.empty()) break;
      const int32_t id = allowed[rng() % allowed.size()];
      if (!m.AcceptToken(id)) {
        std::printf("  ERROR: %s: allowed token %d refused\n", c.name.c_str(), id);
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: grammar_bench TOKENIZER_JSON [--walks N] [--steps N] [--seed S]\n");
    return 2;
  }
  int walks = 20;
  int steps = 64;
  uint32_t seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--walks") == 0) walks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = static_cast<uint32_t>(std::atoi(argv[i + 1]));
  }
  auto tok = vls::tok::Tokenizer::FromFile(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto vocab = std::make_shared<TokenVocab>();
  const int32_t n = (*tok)->id_limit();
  vocab->bytes.resize(static_cast<size_t>(n));
  vocab->usable.assign(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    bool added = false;
    std::string bytes;
    if ((*tok)->TokenBytes(id, false, &bytes, &added) && !(*tok)->IsSpecial(id)) {
      vocab->bytes[static_cast<size_t>(id)] = std::move(bytes);
      vocab->usable[static_cast<size_t>(id)] = 1;
    }
  }
  std::printf("vocabulary: %d ids\n", n);

  const GrammarLimits limits;
  std::vector<Case> cases;
  const std::vector<std::string> json_docs = {
      R"J({"vendor": "ACME Corp.", "date": "2024-03-15", "currency": "EUR", "lines": [{"description": "Widget, large (blue)", "quantity": 3, "unit_price": 19.99, "tags": ["hardware", "blue-1"]}, {"description": "Shipping \"express\"", "quantity": 1, "unit_price": 7.5}], "total": 67.47, "notes": null})J",
      "{\n  \"vendor\": \"Müller & Söhne GmbH\",\n  \"date\": \"2023-12-01\",\n  \"currency\": "
      "\"JPY\",\n"
      "  \"lines\": [\n    {\"description\": \"東京 consulting — 2 days\", \"quantity\": 2, "
      "\"unit_price\": 120000, \"tags\": []}\n  ],\n  \"total\": 240000,\n  \"notes\": \"paid by "
      "card\"\n}"};
  {
    auto schema = vls::ReadFileToString("bench/schemas/invoice.json");
    if (!schema.ok()) {
      std::fprintf(stderr, "%s\n", schema.status().ToString().c_str());
      return 1;
    }
    auto g = vls::grammar::JsonSchemaToGrammar(std::string_view(*schema),
                                               vls::grammar::JsonSchemaOptions{}, limits);
    if (!g.ok()) {
      std::fprintf(stderr, "schema: %s\n", g.status().ToString().c_str());
      return 1;
    }
    cases.push_back({"json-schema(invoice)", std::move(*g), json_docs});
  }
  for (const char* name : {"json", "arithmetic"}) {
    auto text = vls::ReadFileToString(std::string("tests/grammar/gbnf/") + name + ".gbnf");
    if (!text.ok()) {
      std::fprintf(stderr, "%s\n", text.status().ToString().c_str());
      return 1;
    }
    auto g = vls::grammar::ParseGbnf(*text, limits);
    if (!g.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, g.status().ToString().c_str());
      return 1;
    }
    std::vector<std::string> docs = json_docs;
    // Deeper nesting than the schema allows.
    docs.push_back(
        R"J({"a": [[[[{"b": {"c": [1, -2.5e3, {"d": [true, false, null]}]}}]]]], "e": "\u00e9\n"})J");
    if (std::string(name) == "arithmetic") {
      docs = {"x = 1\n", "(a1 + 23) * b_2 / 4.5 = 12\ny - (z * (3 + 4)) = w\n",
              "total_price * 1.19 + shipping = 42.5\n"};
    }
    cases.push_back({std::string("gbnf(") + name + ")", std::move(*g), docs});
  }
  {
    const char* re =
        "[a-z0-9._%+-]{1,32}@[a-z0-9-]{1,32}(\\.[a-z0-9-]{1,32}){0,3}\\.[a-z]{2,8} "
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2})";
    auto g = vls::grammar::RegexToGrammar(re, limits);
    if (!g.ok()) {
      std::fprintf(stderr, "regex: %s\n", g.status().ToString().c_str());
      return 1;
    }
    cases.push_back({"regex(email date-time)",
                     std::move(*g),
                     {"jane.doe+news@mail.example.co.uk 2024-02-29T23:59:60+01:00",
                      "x@y.io 1999-12-31T00:00:00Z"}});
  }

  for (const Case& c : cases) {
    std::printf("%s\n", c.name.c_str());
    std::vector<double> compile_ms;
    std::vector<uint32_t> mask(vls::grammar::MaskWords(vocab->size()));
    std::shared_ptr<const CompiledGrammar> keep;  // holds the vocabulary's token trie
    for (int r = 0; r < 4; ++r) {
      const auto t0 = Clock::now();
      auto cg = CompiledGrammar::Compile(c.grammar, vocab, limits);
      if (!cg.ok()) {
        std::fprintf(stderr, "compile: %s\n", cg.status().ToString().c_str());
        return 1;
      }
      GrammarMatcher m(*cg);
      m.FillNextTokenMask(mask);
      compile_ms.push_back(Us(t0, Clock::now()) / 1000.0);
      keep = *cg;
    }
    std::printf("  compile+first mask: with the token trie's build ms=%.1f; trie built: ",
                compile_ms[0]);
    std::sort(compile_ms.begin() + 1, compile_ms.end());
    std::printf("best_ms=%.1f median_ms=%.1f\n", compile_ms[1], compile_ms[2]);
    auto cg = CompiledGrammar::Compile(c.grammar, vocab, limits);
    for (const char* pass : {"cold", "warm"}) {
      Stats docs;
      Stats rand;
      Stats accept;
      RunWalks(*cg, **tok, c, walks, steps, seed, &docs, &rand, &accept);
      std::printf(" %s cache: mask per token\n", pass);
      docs.Print("docs");
      rand.Print("random");
      accept.Print("accept");
    }
  }
  return 0;
}
