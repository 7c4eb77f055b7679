#include "tokenizer/jinja_parser.h"

#include <initializer_list>
#include <string_view>
#include <utility>

#include "tokenizer/jinja_template.h"

namespace vls::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  StatusOr<NodePtr> ParseTemplate() {
    std::string end;
    VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({}, &end));
    if (Cur().kind != TokKind::kEof) return Error("unexpected tokens after the template end");
    VLS_RETURN_IF_ERROR(CheckTreeDepth(*body));
    return body;
  }

 private:
  // Operator, filter and attribute chains are parsed by loops but build trees one level deeper
  // per link; this walks the finished tree without recursion and refuses one deeper than
  // kMaxTemplateTreeDepth, so that the evaluator's recursion stays bounded.
  static Status CheckTreeDepth(const Node& root) {
    std::vector<std::pair<const Node*, int>> stack = {{&root, 1}};
    while (!stack.empty()) {
      auto [n, depth] = stack.back();
      stack.pop_back();
      if (depth > kMaxTemplateTreeDepth) {
        return ResourceExhausted("template line " + std::to_string(n->line) +
                                 ": syntax tree deeper than kMaxTemplateTreeDepth (" +
                                 std::to_string(kMaxTemplateTreeDepth) +
                                 " levels; long operator, filter or attribute chains count)");
      }
      for (const auto* v : {&n->children, &n->args, &n->kwargs}) {
        for (const NodePtr& c : *v) {
          if (c) stack.emplace_back(c.get(), depth + 1);
        }
      }
    }
    return Status::Ok();
  }

  // One more level of syntax nesting (callers undo it with --depth_ on success; an error ends
  // the parse).
  Status Deeper() {
    if (++depth_ <= kMaxTemplateNesting) return Status::Ok();
    return ResourceExhausted("template line " + std::to_string(Cur().line) +
                             ": nesting deeper than kMaxTemplateNesting (" +
                             std::to_string(kMaxTemplateNesting) +
                             " levels of brackets, unary operators and blocks)");
  }

  const Token& Cur() const { return t_[pos_]; }
  const Token& Peek(size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == TokKind::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().kind == TokKind::kName && Cur().text == n; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    ++pos_;
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!IsName(n)) return false;
    ++pos_;
    return true;
  }
  Status Error(const std::string& msg) const {
    return InvalidArgument("template line " + std::to_string(Cur().line) + ": " + msg);
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokKind::kEof: return "end of template";
      case TokKind::kBlockEnd: return "end of statement block";
      case TokKind::kVarEnd: return "end of print statement";
      case TokKind::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return Status::Ok();
    return Error("expected '" + std::string(op) + "', got " + Describe(Cur()));
  }
  Status ExpectBlockEnd() {
    if (Cur().kind == TokKind::kBlockEnd) {
      ++pos_;
      return Status::Ok();
    }
    return Error("expected end of statement block, got " + Describe(Cur()));
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokKind::kName) return Error("expected a name, got " + Describe(Cur()));
    return t_[pos_++].text;
  }
  NodePtr Make(NodeKind k) const { return std::make_unique<Node>(k, Cur().line); }

  // Parses statements until a block whose keyword is in `ends`; leaves pos_ after that keyword
  // and stores it in *end.
  StatusOr<NodePtr> ParseBody(std::initializer_list<std::string_view> ends, std::string* end) {
    VLS_RETURN_IF_ERROR(Deeper());
    NodePtr body = Make(NodeKind::kBody);
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokKind::kEof) {
        if (ends.size() == 0) break;
        return Error("unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
      }
      if (t.kind == TokKind::kData) {
        NodePtr n = Make(NodeKind::kOutput);
        n->name = t.text;
        body->children.push_back(std::move(n));
        ++pos_;
      } else if (t.kind == TokKind::kVarBegin) {
        ++pos_;
        NodePtr n = Make(NodeKind::kOutput);
        VLS_ASSIGN_OR_RETURN(NodePtr e, ParseTuple(true));
        n->children.push_back(std::move(e));
        if (Cur().kind != TokKind::kVarEnd)
          return Error("expected end of print statement, got " + Describe(Cur()));
        ++pos_;
        body->children.push_back(std::move(n));
      } else if (t.kind == TokKind::kBlockBegin) {
        ++pos_;
        if (Cur().kind != TokKind::kName)
          return Error("expected a statement name, got " + Describe(Cur()));
        const std::string kw = Cur().text;
        for (std::string_view e : ends) {
          if (kw == e) {
            ++pos_;
            *end = kw;
            --depth_;
            return body;
          }
        }
        VLS_ASSIGN_OR_RETURN(NodePtr s, ParseStatement());
        body->children.push_back(std::move(s));
      } else {
        return Error("unexpected " + Describe(t));
      }
    }
    --depth_;
    return body;
  }

  StatusOr<NodePtr> ParseStatement() {
    const std::string kw = Cur().text;
    ++pos_;
    if (kw == "if") return ParseIf();
    if (kw == "for") return ParseFor();
    if (kw == "set") return ParseSet();
    if (kw == "macro") return ParseMacro();
    if (kw == "filter") {
      NodePtr n = Make(NodeKind::kFilterBlock);
      VLS_ASSIGN_OR_RETURN(NodePtr chain, ParseFilterChain(nullptr));
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endfilter"}, &end));
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      n->children.push_back(std::move(body));
      n->children.push_back(std::move(chain));
      return n;
    }
    if (kw == "break" || kw == "continue") {
      NodePtr n = Make(kw == "break" ? NodeKind::kBreak : NodeKind::kContinue);
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (kw == "generation") {  // transformers' AssistantTracker: renders its body unchanged
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endgeneration"}, &end));
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      return body;
    }
    return Error("unsupported template statement '" + kw + "'");
  }

  // if / elif... / else in one node (a loop, so a long elif chain does not recurse).
  StatusOr<NodePtr> ParseIf() {
    NodePtr n = Make(NodeKind::kIf);
    std::string end = "elif";
    while (end == "elif") {
      VLS_ASSIGN_OR_RETURN(NodePtr test, ParseTuple(false));
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({"elif", "else", "endif"}, &end));
      n->children.push_back(std::move(test));
      n->children.push_back(std::move(body));
    }
    if (end == "else") {
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      VLS_ASSIGN_OR_RETURN(NodePtr els, ParseBody({"endif"}, &end));
      n->children.push_back(std::move(els));
    }
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    return n;
  }

  Status ParseTargets(std::vector<std::string>* names) {
    const bool paren = SkipOp("(");
    do {
      VLS_ASSIGN_OR_RETURN(std::string name, ExpectName());
      names->push_back(name);
    } while (SkipOp(","));
    if (paren) VLS_RETURN_IF_ERROR(ExpectOp(")"));
    return Status::Ok();
  }

  StatusOr<NodePtr> ParseFor() {
    NodePtr n = Make(NodeKind::kFor);
    VLS_RETURN_IF_ERROR(ParseTargets(&n->names));
    if (!SkipName("in")) return Error("expected 'in' in for loop, got " + Describe(Cur()));
    VLS_ASSIGN_OR_RETURN(NodePtr iter, ParseTuple(false, /*stop_at_if=*/true));
    NodePtr filter;
    if (SkipName("if")) {
      VLS_ASSIGN_OR_RETURN(filter, ParseExpression(true));
    }
    if (IsName("recursive")) return Error("unsupported template feature 'recursive' loops");
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({"else", "endfor"}, &end));
    NodePtr els;
    if (end == "else") {
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      VLS_ASSIGN_OR_RETURN(els, ParseBody({"endfor"}, &end));
    }
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    n->children.push_back(std::move(iter));
    n->children.push_back(std::move(body));
    n->children.push_back(std::move(els));
    n->children.push_back(std::move(filter));
    return n;
  }

  StatusOr<NodePtr> ParseSet() {
    if (Cur().kind == TokKind::kName && Peek().kind == TokKind::kOp && Peek().text == ".") {
      // {% set ns.attr = value %}
      NodePtr n = Make(NodeKind::kSet);
      NodePtr target = Make(NodeKind::kGetAttr);
      NodePtr obj = Make(NodeKind::kName);
      obj->name = Cur().text;
      pos_ += 2;
      VLS_ASSIGN_OR_RETURN(target->name, ExpectName());
      target->children.push_back(std::move(obj));
      VLS_RETURN_IF_ERROR(ExpectOp("="));
      VLS_ASSIGN_OR_RETURN(NodePtr value, ParseTuple(true));
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      n->children.push_back(std::move(value));
      n->children.push_back(std::move(target));
      return n;
    }
    std::vector<std::string> names;
    VLS_RETURN_IF_ERROR(ParseTargets(&names));
    if (SkipOp("=")) {
      NodePtr n = Make(NodeKind::kSet);
      n->names = std::move(names);
      VLS_ASSIGN_OR_RETURN(NodePtr value, ParseTuple(true));
      VLS_RETURN_IF_ERROR(ExpectBlockEnd());
      n->children.push_back(std::move(value));
      return n;
    }
    if (names.size() != 1) return Error("a {% set %} block assigns one name");
    NodePtr n = Make(NodeKind::kSetBlock);
    n->names = std::move(names);
    NodePtr chain;
    if (SkipOp("|")) {
      VLS_ASSIGN_OR_RETURN(chain, ParseFilterChain(nullptr));
    }
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endset"}, &end));
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    n->children.push_back(std::move(body));
    n->children.push_back(std::move(chain));
    return n;
  }

  StatusOr<NodePtr> ParseMacro() {
    NodePtr n = Make(NodeKind::kMacro);
    VLS_ASSIGN_OR_RETURN(n->name, ExpectName());
    VLS_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!n->names.empty()) VLS_RETURN_IF_ERROR(ExpectOp(","));
      VLS_ASSIGN_OR_RETURN(std::string param, ExpectName());
      n->names.push_back(param);
      NodePtr def;
      if (SkipOp("=")) {
        VLS_ASSIGN_OR_RETURN(def, ParseExpression(true));
      }
      n->args.push_back(std::move(def));
    }
    ++pos_;
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    VLS_ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endmacro"}, &end));
    VLS_RETURN_IF_ERROR(ExpectBlockEnd());
    n->children.push_back(std::move(body));
    return n;
  }

  // expr ("," expr)* -> a tuple when there is a comma.
  StatusOr<NodePtr> ParseTuple(bool with_condexpr, bool stop_at_if = false) {
    VLS_ASSIGN_OR_RETURN(NodePtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    NodePtr t = Make(NodeKind::kTuple);
    t->children.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().kind == TokKind::kBlockEnd || Cur().kind == TokKind::kVarEnd || IsOp(")") ||
          (stop_at_if && IsName("if"))) {
        break;
      }
      VLS_ASSIGN_OR_RETURN(NodePtr e, ParseExpression(with_condexpr));
      t->children.push_back(std::move(e));
    }
    return t;
  }

  StatusOr<NodePtr> ParseExpression(bool with_condexpr) {
    VLS_RETURN_IF_ERROR(Deeper());
    auto r = with_condexpr ? ParseCondExpr() : ParseOr();
    --depth_;
    return r;
  }

  StatusOr<NodePtr> ParseCondExpr() {
    VLS_ASSIGN_OR_RETURN(NodePtr expr, ParseOr());
    while (SkipName("if")) {
      NodePtr n = Make(NodeKind::kCondExpr);
      VLS_ASSIGN_OR_RETURN(NodePtr test, ParseOr());
      NodePtr els;
      if (SkipName("else")) {
        VLS_RETURN_IF_ERROR(Deeper());
        VLS_ASSIGN_OR_RETURN(els, ParseCondExpr());
        --depth_;
      }
      n->children.push_back(std::move(expr));
      n->children.push_back(std::move(test));
      n->children.push_back(std::move(els));
      expr = std::move(n);
    }
    return expr;
  }

  NodePtr Binary(const std::string& op, NodePtr l, NodePtr r) {
    NodePtr n = Make(NodeKind::kBinary);
    n->name = op;
    n->children.push_back(std::move(l));
    n->children.push_back(std::move(r));
    return n;
  }

  StatusOr<NodePtr> ParseOr() {
    VLS_ASSIGN_OR_RETURN(NodePtr l, ParseAnd());
    while (SkipName("or")) {
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParseAnd());
      l = Binary("or", std::move(l), std::move(r));
    }
    return l;
  }
  StatusOr<NodePtr> ParseAnd() {
    VLS_ASSIGN_OR_RETURN(NodePtr l, ParseNot());
    while (SkipName("and")) {
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParseNot());
      l = Binary("and", std::move(l), std::move(r));
    }
    return l;
  }
  StatusOr<NodePtr> ParseNot() {
    if (SkipName("not")) {
      VLS_RETURN_IF_ERROR(Deeper());
      NodePtr n = Make(NodeKind::kUnary);
      n->name = "not";
      VLS_ASSIGN_OR_RETURN(NodePtr e, ParseNot());
      --depth_;
      n->children.push_back(std::move(e));
      return n;
    }
    return ParseCompare();
  }
  StatusOr<NodePtr> ParseCompare() {
    VLS_ASSIGN_OR_RETURN(NodePtr first, ParseMath1());
    NodePtr n;
    while (true) {
      std::string op;
      if (Cur().kind == TokKind::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
           Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++pos_;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (IsName("not") && Peek().kind == TokKind::kName && Peek().text == "in") {
        op = "notin";
        pos_ += 2;
      } else {
        break;
      }
      if (!n) {
        n = Make(NodeKind::kCompare);
        n->children.push_back(std::move(first));
      }
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParseMath1());
      n->names.push_back(op);
      n->children.push_back(std::move(r));
    }
    return n ? std::move(n) : std::move(first);
  }
  StatusOr<NodePtr> ParseMath1() {
    VLS_ASSIGN_OR_RETURN(NodePtr l, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const std::string op = t_[pos_++].text;
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParseConcat());
      l = Binary(op, std::move(l), std::move(r));
    }
    return l;
  }
  StatusOr<NodePtr> ParseConcat() {
    VLS_ASSIGN_OR_RETURN(NodePtr l, ParseMath2());
    while (SkipOp("~")) {
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParseMath2());
      l = Binary("~", std::move(l), std::move(r));
    }
    return l;
  }
  StatusOr<NodePtr> ParseMath2() {
    VLS_ASSIGN_OR_RETURN(NodePtr l, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = t_[pos_++].text;
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParsePow());
      l = Binary(op, std::move(l), std::move(r));
    }
    return l;
  }
  StatusOr<NodePtr> ParsePow() {
    VLS_ASSIGN_OR_RETURN(NodePtr l, ParseUnary(true));
    while (SkipOp("**")) {
      VLS_ASSIGN_OR_RETURN(NodePtr r, ParseUnary(true));
      l = Binary("**", std::move(l), std::move(r));
    }
    return l;
  }
  StatusOr<NodePtr> ParseUnary(bool with_filter) {
    NodePtr node;
    if (IsOp("-") || IsOp("+")) {
      VLS_RETURN_IF_ERROR(Deeper());
      node = Make(NodeKind::kUnary);
      node->name = t_[pos_++].text;
      VLS_ASSIGN_OR_RETURN(NodePtr e, ParseUnary(false));
      --depth_;
      node->children.push_back(std::move(e));
    } else {
      VLS_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    VLS_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      VLS_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  StatusOr<NodePtr> ParsePrimary() {
    const Token& t = Cur();
    NodePtr n = Make(NodeKind::kLiteral);
    switch (t.kind) {
      case TokKind::kName:
        ++pos_;
        if (t.text == "true" || t.text == "True") {
          n->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          n->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          n->value = Value::None();
        } else {
          n->kind = NodeKind::kName;
          n->name = t.text;
        }
        return n;
      case TokKind::kString: {
        std::string s;
        while (Cur().kind == TokKind::kString) s += t_[pos_++].text;  // adjacent literals join
        n->value = Value::String(std::move(s));
        return n;
      }
      case TokKind::kInt:
        ++pos_;
        n->value = Value::Int(t.int_value);
        return n;
      case TokKind::kFloat:
        ++pos_;
        n->value = Value::Float(t.float_value);
        return n;
      default: break;
    }
    if (SkipOp("(")) {
      if (SkipOp(")")) return Make(NodeKind::kTuple);
      VLS_ASSIGN_OR_RETURN(NodePtr e, ParseTuple(true));
      VLS_RETURN_IF_ERROR(ExpectOp(")"));
      return e;
    }
    if (SkipOp("[")) {
      NodePtr l = Make(NodeKind::kList);
      while (!IsOp("]")) {
        if (!l->children.empty()) VLS_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
        VLS_ASSIGN_OR_RETURN(NodePtr e, ParseExpression(true));
        l->children.push_back(std::move(e));
      }
      ++pos_;
      return l;
    }
    if (SkipOp("{")) {
      NodePtr d = Make(NodeKind::kDict);
      while (!IsOp("}")) {
        if (!d->children.empty()) VLS_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
        VLS_ASSIGN_OR_RETURN(NodePtr k, ParseExpression(true));
        VLS_RETURN_IF_ERROR(ExpectOp(":"));
        VLS_ASSIGN_OR_RETURN(NodePtr v, ParseExpression(true));
        d->children.push_back(std::move(k));
        d->children.push_back(std::move(v));
      }
      ++pos_;
      return d;
    }
    return Error("unexpected " + Describe(t) + " in expression");
  }

  Status ParseCallArgs(Node* n) {
    // Called after "(".
    while (!IsOp(")")) {
      if (!n->args.empty() || !n->kwargs.empty()) VLS_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Error("unsupported template feature '*args' in calls");
      if (Cur().kind == TokKind::kName && Peek().kind == TokKind::kOp && Peek().text == "=") {
        n->kwarg_names.push_back(Cur().text);
        pos_ += 2;
        VLS_ASSIGN_OR_RETURN(NodePtr v, ParseExpression(true));
        n->kwargs.push_back(std::move(v));
      } else {
        if (!n->kwargs.empty()) return Error("positional argument after keyword argument");
        VLS_ASSIGN_OR_RETURN(NodePtr v, ParseExpression(true));
        n->args.push_back(std::move(v));
      }
    }
    ++pos_;
    return Status::Ok();
  }

  StatusOr<NodePtr> ParsePostfix(NodePtr node) {
    while (true) {
      if (SkipOp(".")) {
        if (Cur().kind == TokKind::kInt) {
          NodePtr n = Make(NodeKind::kGetItem);
          NodePtr idx = Make(NodeKind::kLiteral);
          idx->value = Value::Int(t_[pos_++].int_value);
          n->children.push_back(std::move(node));
          n->children.push_back(std::move(idx));
          node = std::move(n);
          continue;
        }
        NodePtr n = Make(NodeKind::kGetAttr);
        VLS_ASSIGN_OR_RETURN(n->name, ExpectName());
        n->children.push_back(std::move(node));
        node = std::move(n);
      } else if (SkipOp("[")) {
        VLS_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (SkipOp("(")) {
        NodePtr n = Make(NodeKind::kCall);
        n->children.push_back(std::move(node));
        VLS_RETURN_IF_ERROR(ParseCallArgs(n.get()));
        node = std::move(n);
      } else {
        return node;
      }
    }
  }

  StatusOr<NodePtr> ParseSubscript(NodePtr obj) {
    // After "[": an index or a slice a:b:c.
    NodePtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!IsOp("]")) {
      if (SkipOp(":")) {
        is_slice = true;
        if (++part > 2) return Error("too many ':' in slice");
        continue;
      }
      if (parts[part]) return Error("expected ']' or ':' in subscript, got " + Describe(Cur()));
      VLS_ASSIGN_OR_RETURN(parts[part], ParseExpression(true));
    }
    ++pos_;
    if (!is_slice) {
      if (!parts[0]) return Error("empty subscript");
      NodePtr n = Make(NodeKind::kGetItem);
      n->children.push_back(std::move(obj));
      n->children.push_back(std::move(parts[0]));
      return n;
    }
    NodePtr n = Make(NodeKind::kSlice);
    n->children.push_back(std::move(obj));
    for (auto& p : parts) n->children.push_back(std::move(p));
    return n;
  }

  // "| name(args) | name ..." applied to `operand` (null for filter blocks).
  StatusOr<NodePtr> ParseFilterChain(NodePtr operand) {
    bool first = true;
    while (first ? (operand == nullptr || SkipOp("|")) : SkipOp("|")) {
      first = false;
      NodePtr n = Make(NodeKind::kFilter);
      VLS_ASSIGN_OR_RETURN(n->name, ExpectName());
      while (SkipOp(".")) {
        VLS_ASSIGN_OR_RETURN(std::string more, ExpectName());
        n->name += "." + more;
      }
      if (SkipOp("(")) VLS_RETURN_IF_ERROR(ParseCallArgs(n.get()));
      n->children.push_back(std::move(operand));
      operand = std::move(n);
      if (!IsOp("|")) break;
    }
    return operand;
  }

  StatusOr<NodePtr> ParseFilterExpr(NodePtr node) {
    while (true) {
      if (IsOp("|")) {
        VLS_ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node)));
      } else if (SkipName("is")) {
        NodePtr n = Make(NodeKind::kTest);
        n->negated = SkipName("not");
        VLS_ASSIGN_OR_RETURN(n->name, ExpectName());
        if (SkipOp("(")) {
          VLS_RETURN_IF_ERROR(ParseCallArgs(n.get()));
        } else if ((Cur().kind == TokKind::kName || Cur().kind == TokKind::kString ||
                    Cur().kind == TokKind::kInt || Cur().kind == TokKind::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !(IsName("else") || IsName("or") || IsName("and") || IsName("if") ||
                     IsName("in") || IsName("not") || IsName("is"))) {
          VLS_ASSIGN_OR_RETURN(NodePtr arg, ParsePrimary());
          VLS_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          n->args.push_back(std::move(arg));
        }
        n->children.push_back(std::move(node));
        node = std::move(n);
      } else if (SkipOp("(")) {
        NodePtr n = Make(NodeKind::kCall);
        n->children.push_back(std::move(node));
        VLS_RETURN_IF_ERROR(ParseCallArgs(n.get()));
        node = std::move(n);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<NodePtr> Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace vls::jinja
