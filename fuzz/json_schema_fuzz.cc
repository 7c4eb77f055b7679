// Fuzz target for JSON Schemas (grammar/json_schema.h): response_format, strict tools and the
// `json_schema` request field, text from users and requests.
//
// The first byte chooses strict mode; the rest is the schema text. JsonSchemaToGrammar must
// return a grammar or an error, never crash, hang or build past its limits (small ones here, so
// that each input is quick). An error about a keyword names its JSON pointer ("at /..."). A
// grammar it returns is valid (the function validates it), must compile for a vocabulary of
// the 256 bytes, and the matcher must run over the schema text itself.
//
// Real fuzzing: scripts/fuzz.sh 600 json_schema. Without libFuzzer, `json_schema_fuzz_replay`
// (a ctest) runs this target over tests/corpus/json_schema and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace {

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "json_schema_fuzz: %s (input of %zu bytes)\n", what, text.size());
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
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  vls::grammar::GrammarLimits limits;
  limits.max_source_bytes = 16 * 1024;
  limits.max_rules = 3000;
  limits.max_elements = 30000;
  limits.max_repeat = 100;
  limits.max_nesting = 16;
  limits.max_enum = 200;
  vls::grammar::JsonSchemaOptions options;
  options.strict = (data[0] & 1) != 0;
  auto g = vls::grammar::JsonSchemaToGrammar(text, options, limits);
  if (!g.ok()) {
    const std::string& m = g.status().message();
    if (m.empty()) Fail("an error without a message", text);
    if (m.find("keyword \"") != std::string::npos && m.find(" at /") == std::string::npos) {
      Fail("a keyword error without its JSON pointer", text);
    }
    return 0;
  }
  if (g->rules.size() > limits.max_rules) Fail("a grammar past the rule limit", text);
  auto compiled = vls::grammar::CompiledGrammar::Compile(*g, ByteVocab(), limits);
  if (!compiled.ok()) Fail("a valid grammar that does not compile", text);
  vls::grammar::GrammarMatcher matcher(*compiled);
  for (const char c : text.substr(0, 512)) {
    if (!matcher.AcceptBytes(std::string_view(&c, 1))) break;
  }
  (void)matcher.CanEnd();
  return 0;
}
