#include "runtime/grammar_vocab.h"

#include <algorithm>
#include <string>

namespace vls {

std::shared_ptr<const grammar::TokenVocab> BuildGrammarVocab(const tok::Tokenizer& tokenizer,
                                                             int32_t vocab) {
  auto v = std::make_shared<grammar::TokenVocab>();
  const int32_t n = std::max<int32_t>(vocab, 0);
  v->bytes.resize(static_cast<size_t>(n));
  v->usable.assign(static_cast<size_t>(n), 0);
  const int32_t known = std::min(n, tokenizer.id_limit());
  for (int32_t id = 0; id < known; ++id) {
    std::string bytes;
    bool added = false;
    if (!tokenizer.TokenBytes(id, /*skip_special_tokens=*/false, &bytes, &added)) continue;
    const bool usable = !bytes.empty() && !tokenizer.IsSpecial(id);
    v->bytes[static_cast<size_t>(id)] = std::move(bytes);
    v->usable[static_cast<size_t>(id)] = usable ? 1 : 0;
  }
  return v;
}

}  // namespace vls
