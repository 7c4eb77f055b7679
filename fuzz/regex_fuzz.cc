// Fuzz target for regular expressions (grammar/regex.h): the `regex` request field and JSON
// Schema `pattern`s, text from users and requests.
//
// The first byte chooses the mode (whole match, or a JSON string's pattern with search
// semantics); the rest is the pattern. AddRegexRule must return a rule or an error, never crash,
// hang or build past its limits (small ones here, so that each input is quick). An error names
// the offset or the limit. A grammar it returns must pass ValidateGrammar, compile for a
// vocabulary of the 256 bytes, and the matcher must run over the pattern's own bytes.
//
// Real fuzzing: scripts/fuzz.sh 600 regex. Without libFuzzer, `regex_fuzz_replay` (a ctest)
// runs this target over tests/corpus/regex and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema_regex.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace {

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "regex_fuzz: %s (input of %zu bytes)\n", what, text.size());
  std::abort();
}

std::shared_ptr<const vls::grammar::TokenVocab> ByteVocab() {
  static const std::shared_ptr<const vls::grammar::TokenVocab> kVocab = [] {
    auto v = std::make_shared<vls::grammar::TokenVocab>();
    for (int b = 0; b < 256; ++b) v->bytes.emplace_back(1, static_cast<char>(b));
    v->usable.assign(256, 1);
    return std::shared_ptr<const vls::grammar::TokenVocab>(std::move(v));
  }();
  return kVocab;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view pattern(reinterpret_cast<const char*>(data) + 1, size - 1);
  vls::grammar::GrammarLimits limits;
  limits.max_source_bytes = 16 * 1024;
  limits.max_rules = 2000;
  limits.max_elements = 20000;
  limits.max_repeat = 100;
  limits.max_nesting = 16;
  vls::grammar::RegexMode mode;
  mode.json_string = (data[0] & 1) != 0;
  mode.search = (data[0] & 2) != 0;
  vls::grammar::GrammarBuilder builder;
  auto rule = vls::grammar::AddRegexRuleWithMode(&builder, pattern, "root", limits, mode);
  if (!rule.ok()) {
    const std::string& m = rule.status().message();
    if (m.find("at offset") == std::string::npos && m.find("limit") == std::string::npos) {
      Fail("an error naming neither an offset nor a limit", pattern);
    }
    return 0;
  }
  if (builder.rule_count() > limits.max_rules || builder.element_count() > limits.max_elements) {
    Fail("a grammar past the limits", pattern);
  }
  const vls::grammar::Grammar g = std::move(builder).Build(*rule);
  if (!vls::grammar::ValidateGrammar(g, limits).ok())
    Fail("a grammar that fails validation", pattern);
  auto compiled = vls::grammar::CompiledGrammar::Compile(g, ByteVocab(), limits);
  if (!compiled.ok()) Fail("a valid grammar that does not compile", pattern);
  vls::grammar::GrammarMatcher matcher(*compiled);
  for (const char c : pattern.substr(0, 256)) {
    if (!matcher.AcceptBytes(std::string_view(&c, 1))) break;
  }
  (void)matcher.CanEnd();
  return 0;
}
