// Syntax tree of the Jinja template engine: one node type with a kind tag, since the subset is
// small and the evaluator switches on it.
#ifndef VLSTACK_TOKENIZER_JINJA_AST_H_
#define VLSTACK_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace vls::jinja {

enum class NodeKind {
  // Expressions.
  kLiteral,   // value
  kName,      // name
  kList,      // children = items
  kTuple,     // children = items
  kDict,      // children = key0, value0, key1, value1, ...
  kGetAttr,   // children[0] . name
  kGetItem,   // children[0] [ children[1] ]
  kSlice,     // children[0] [ children[1] : children[2] : children[3] ] (null = absent)
  kCall,      // children[0] ( args ); kwargs in names/kwargs
  kFilter,    // name; children[0] = operand (null inside {% filter %}); args/kwargs
  kTest,      // name; children[0] = operand; args; negated
  kUnary,     // name = "not" | "-" | "+"; children[0]
  kBinary,    // name = operator; children[0], children[1]
  kCompare,   // children[0] then pairs: ops[i] applies to children[i+1]
  kCondExpr,  // children = then, test, else (else may be null)
  // Statements.
  kOutput,       // data text in name, or children[0] = expression to print
  kBody,         // children = statements
  kIf,           // children = test0, body0, test1, body1 (elif), ..., else-body (if present)
  kFor,          // targets in names; children = iter, body, else-body|null, filter|null
  kSet,          // targets in names (or children[1] = attribute target); children[0] = value
  kSetBlock,     // names[0]; children[0] = body; children[1] = filter chain|null
  kMacro,        // name; names = params; children[0] = body; defaults in args
  kFilterBlock,  // children[0] = body, children[1] = filter chain
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;
  Value value;
  std::vector<std::unique_ptr<Node>> children;
  std::vector<std::unique_ptr<Node>> args;  // positional call / filter / test args
  std::vector<std::string> kwarg_names;     // keyword arg names, parallel to kwargs
  std::vector<std::unique_ptr<Node>> kwargs;
  std::vector<std::string> names;  // targets, params, compare operators
  bool negated = false;

  Node(NodeKind k, int l) : kind(k), line(l) {}
  // Frees the subtree without recursion, so that a tree too deep for the parser's depth check
  // (which refuses it after building it) cannot overflow the stack on its way out.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
};
using NodePtr = std::unique_ptr<Node>;

inline Node::~Node() {
  std::vector<NodePtr> pending;
  auto take = [&pending](Node& n) {
    for (auto* v : {&n.children, &n.args, &n.kwargs}) {
      for (NodePtr& c : *v) {
        if (c) pending.push_back(std::move(c));
      }
    }
  };
  take(*this);
  while (!pending.empty()) {
    NodePtr n = std::move(pending.back());
    pending.pop_back();
    take(*n);
  }  // `n` is destroyed here with no children left
}

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_AST_H_
