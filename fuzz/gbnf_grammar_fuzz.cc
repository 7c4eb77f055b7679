// Fuzz target for GBNF grammars (grammar/gbnf.h), text from users and requests.
//
// ParseGbnf must return a grammar or an error, never crash, hang or allocate past its limits
// (small ones here, so that each input is quick). A grammar it returns must pass
// ValidateGrammar, and PrintGbnf of it must parse again (under the same limits but for the
// source size) to a grammar that prints the same text.
//
// Real fuzzing: scripts/fuzz.sh 600 gbnf_grammar. Without libFuzzer, `gbnf_grammar_fuzz_replay`
// (a ctest) runs this target over tests/corpus/gbnf_grammar and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"

namespace {

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "gbnf_grammar_fuzz: %s (input of %zu bytes)\n", what, text.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  vls::grammar::GrammarLimits limits;
  limits.max_source_bytes = 64 * 1024;
  limits.max_rules = 2000;
  limits.max_elements = 20000;
  limits.max_repeat = 200;
  auto g = vls::grammar::ParseGbnf(text, limits);
  if (!g.ok()) {
    if (g.status().message().empty()) Fail("an error without a message", text);
    return 0;
  }
  if (!vls::grammar::ValidateGrammar(*g, limits).ok())
    Fail("a grammar that fails validation", text);
  const std::string printed = vls::grammar::PrintGbnf(*g);
  vls::grammar::GrammarLimits reparse = limits;
  reparse.max_source_bytes = SIZE_MAX;
  auto again = vls::grammar::ParseGbnf(printed, reparse);
  if (!again.ok()) Fail("the printed grammar does not parse", text);
  if (again->rules.size() != g->rules.size() || again->root != g->root) {
    Fail("the printed grammar parses to other rules", text);
  }
  if (vls::grammar::PrintGbnf(*again) != printed) Fail("printing is not a fixed point", text);
  return 0;
}
