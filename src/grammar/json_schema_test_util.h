// Test helpers of the regex and JSON Schema front ends: run a grammar over text with the
// matcher and a vocabulary of the 256 single bytes. Tests only.
#ifndef VLSTACK_GRAMMAR_JSON_SCHEMA_TEST_UTIL_H_
#define VLSTACK_GRAMMAR_JSON_SCHEMA_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace vls::grammar::testing_util {

inline std::shared_ptr<const TokenVocab> ByteVocab() {
  static const std::shared_ptr<const TokenVocab> kVocab = [] {
    auto v = std::make_shared<TokenVocab>();
    for (int b = 0; b < 256; ++b) v->bytes.emplace_back(1, static_cast<char>(b));
    v->usable.assign(256, 1);
    return std::shared_ptr<const TokenVocab>(std::move(v));
  }();
  return kVocab;
}

inline std::shared_ptr<const CompiledGrammar> CompileForBytes(const Grammar& g) {
  StatusOr<std::shared_ptr<const CompiledGrammar>> c =
      CompiledGrammar::Compile(g, ByteVocab(), GrammarLimits{});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : nullptr;
}

// The whole text is a sentence of the grammar.
inline bool Accepts(const std::shared_ptr<const CompiledGrammar>& c, std::string_view text) {
  if (c == nullptr) return false;
  GrammarMatcher m(c);
  return m.AcceptBytes(text) && m.CanEnd();
}

inline bool Accepts(const Grammar& g, std::string_view text) {
  return Accepts(CompileForBytes(g), text);
}

}  // namespace vls::grammar::testing_util

#endif  // VLSTACK_GRAMMAR_JSON_SCHEMA_TEST_UTIL_H_
