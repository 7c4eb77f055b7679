// Test tool: random strings from a GBNF grammar, generated the way a model would be constrained
// (tests/grammar/gbnf_languages_test.py checks them with an independent recogniser).
//
//   gbnf_sample TOKENIZER_JSON GRAMMAR.gbnf SEED COUNT MAX_TOKENS
//
// Loads the tokenizer, makes the grammar vocabulary from Tokenizer::TokenBytes (usable: every
// token with bytes that is not special), compiles the grammar and, COUNT times, starts a
// GrammarMatcher and picks uniformly random allowed tokens (std::mt19937_64 seeded with SEED)
// until the matcher can end and a coin flip says stop, or MAX_TOKENS tokens were taken. At each
// step it also checks the mask against the matcher: the picked token must be accepted, and a few
// random tokens outside the mask must be refused. Prints one JSON line per string:
//   {"hex": "<the bytes in hex>", "complete": true|false, "tokens": N}
// and exits non-zero on any inconsistency (a dead end before the grammar can end, a picked token
// refused, a refused token accepted).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/file.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using vls::grammar::CompiledGrammar;
using vls::grammar::GrammarMatcher;
using vls::grammar::TokenVocab;

int Die(const std::string& what) {
  std::fprintf(stderr, "gbnf_sample: %s\n", what.c_str());
  return 1;
}

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::shared_ptr<const TokenVocab> MakeVocab(const vls::tok::Tokenizer& tokenizer) {
  auto v = std::make_shared<TokenVocab>();
  const int32_t n = tokenizer.id_limit();
  v->bytes.resize(static_cast<size_t>(n));
  v->usable.assign(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    std::string bytes;
    bool added = false;
    if (!tokenizer.TokenBytes(id, /*skip_special_tokens=*/false, &bytes, &added)) continue;
    v->usable[static_cast<size_t>(id)] = !bytes.empty() && !tokenizer.IsSpecial(id) ? 1 : 0;
    v->bytes[static_cast<size_t>(id)] = std::move(bytes);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    return Die("usage: gbnf_sample TOKENIZER_JSON GRAMMAR.gbnf SEED COUNT MAX_TOKENS");
  }
  auto tokenizer = vls::tok::Tokenizer::FromFile(argv[1]);
  if (!tokenizer.ok()) return Die(tokenizer.status().message());
  auto text = vls::ReadFileToString(argv[2]);
  if (!text.ok()) return Die(text.status().message());
  const vls::grammar::GrammarLimits limits;
  auto grammar = vls::grammar::ParseGbnf(*text, limits);
  if (!grammar.ok()) return Die(grammar.status().message());
  const std::shared_ptr<const TokenVocab> vocab = MakeVocab(**tokenizer);
  auto compiled = CompiledGrammar::Compile(*grammar, vocab, limits);
  if (!compiled.ok()) return Die(compiled.status().message());

  std::mt19937_64 rng(std::strtoull(argv[3], nullptr, 10));
  const long count = std::strtol(argv[4], nullptr, 10);
  const long max_tokens = std::strtol(argv[5], nullptr, 10);
  const int32_t v = vocab->size();
  std::vector<uint32_t> mask(vls::grammar::MaskWords(v));
  std::vector<int32_t> allowed;
  for (long i = 0; i < count; ++i) {
    GrammarMatcher matcher(*compiled);
    std::string out;
    long tokens = 0;
    bool complete = false;
    while (tokens < max_tokens) {
      if (matcher.CanEnd() && (matcher.MustEnd() || rng() % 2 == 0)) {
        complete = true;
        break;
      }
      std::fill(mask.begin(), mask.end(), 0u);
      matcher.FillNextTokenMask(mask);
      allowed.clear();
      for (int32_t id = 0; id < v; ++id) {
        if (vls::grammar::MaskAllows(mask, id)) allowed.push_back(id);
      }
      if (allowed.empty() && matcher.CanEnd()) {
        complete = true;
        break;
      }
      if (allowed.empty()) {
        return Die("string " + std::to_string(i) + ": no token allowed after \"" + out +
                   "\" and the grammar cannot end");
      }
      for (int k = 0; k < 4; ++k) {
        const auto id = static_cast<int32_t>(rng() % static_cast<uint64_t>(v));
        if (!vls::grammar::MaskAllows(mask, id) && matcher.AcceptToken(id)) {
          return Die("string " + std::to_string(i) + ": token " + std::to_string(id) +
                     " is outside the mask but accepted after \"" + out + "\"");
        }
      }
      const int32_t id = allowed[rng() % allowed.size()];
      if (!matcher.AcceptToken(id)) {
        return Die("string " + std::to_string(i) + ": token " + std::to_string(id) +
                   " is in the mask but refused after \"" + out + "\"");
      }
      out += vocab->bytes[static_cast<size_t>(id)];
      ++tokens;
    }
    if (!complete && matcher.CanEnd()) complete = true;
    std::printf("{\"hex\": \"%s\", \"complete\": %s, \"tokens\": %ld}\n", Hex(out).c_str(),
                complete ? "true" : "false", tokens);
  }
  return 0;
}
