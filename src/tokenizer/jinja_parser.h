// Parser of the Jinja template engine: tokens -> syntax tree.
#ifndef VLSTACK_TOKENIZER_JINJA_PARSER_H_
#define VLSTACK_TOKENIZER_JINJA_PARSER_H_

#include <vector>

#include "base/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace vls::jinja {

// Returns the template body (a kBody node). Statements outside the supported subset
// (include, extends, import, call, ...) are refused by name.
StatusOr<NodePtr> Parse(const std::vector<Token>& tokens);

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_PARSER_H_
