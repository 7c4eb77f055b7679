// Lexer of the Jinja template engine: template text -> tokens, applying the whitespace rules of
// Jinja2 as transformers configures it (trim_blocks, lstrip_blocks, "-" markers, newline
// normalisation, one trailing newline dropped).
#ifndef VLSTACK_TOKENIZER_JINJA_LEXER_H_
#define VLSTACK_TOKENIZER_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vls::jinja {

enum class TokKind {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokKind kind = TokKind::kEof;
  std::string text;  // data, name, string value or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options);

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_LEXER_H_
