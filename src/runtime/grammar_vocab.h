// The model's vocabulary as the grammar matcher sees it (grammar::TokenVocab): each token id's
// bytes from the tokenizer, and which ids a grammar may produce.
#ifndef VLSTACK_RUNTIME_GRAMMAR_VOCAB_H_
#define VLSTACK_RUNTIME_GRAMMAR_VOCAB_H_

#include <cstdint>
#include <memory>

#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace vls {

// [vocab] entries (the model's vocabulary size V, which may exceed the tokenizer's ids): the
// bytes Tokenizer::TokenBytes gives each id (added tokens as their content, so Qwen3's
// "<tool_call>", an added token that is not special, is written by a grammar as its text).
// usable = 1 for every id with bytes that is not a special token; ids the tokenizer does not
// know, and tokens with no bytes, are never usable. Linear in the vocabulary (about 20 ms for
// Qwen3's 151,936 ids); build once per model.
std::shared_ptr<const grammar::TokenVocab> BuildGrammarVocab(const tok::Tokenizer& tokenizer,
                                                             int32_t vocab);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_GRAMMAR_VOCAB_H_
