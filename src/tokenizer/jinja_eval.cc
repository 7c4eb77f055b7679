// Evaluator of the Jinja template engine: scopes as Jinja2 compiles them (a for loop body gets
// a fresh scope per iteration, `if` none, macros their own), Python operator semantics.
#include <cmath>
#include <cstring>
#include <ctime>

#include "base/stack.h"
#include "tokenizer/jinja_budget.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_template.h"

namespace vls::jinja {
namespace {

struct Scope {
  std::shared_ptr<Scope> parent;
  ValueDict vars;

  const Value* Lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (const auto& kv : s->vars) {
        if (kv.first == name) return &kv.second;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    for (auto& kv : vars) {
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

Status UndefinedError(const Value& v) {
  return InvalidArgument(v.str().empty() ? "undefined value used" : v.str());
}

StatusOr<Value> Arith(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  auto type_error = [&]() {
    return InvalidArgument("unsupported operand type(s) for " + op + ": '" + a.TypeName() +
                           "' and '" + b.TypeName() + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      VLS_RETURN_IF_ERROR(CheckString(a.str().size() + b.str().size(), "'+'"));
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      VLS_RETURN_IF_ERROR(CheckItems(a.list().size() + b.list().size(), "'+'"));
      ValueList l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(l));
    }
  }
  if (op == "*" &&
      ((a.is_string() || a.is_list()) && b.is_number() && b.kind() != Value::Kind::kFloat)) {
    // The size is checked before anything is built: len * n may not even fit in 64 bits.
    const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(0, b.as_int()));
    const uint64_t len = a.is_string() ? a.str().size() : a.list().size();
    const uint64_t total = len == 0 ? 0 : (n > UINT64_MAX / len ? UINT64_MAX : len * n);
    if (a.is_string()) {
      VLS_RETURN_IF_ERROR(CheckString(total, "'*' (string repetition)"));
      // By doubling: log2(n) copies instead of n appends ('x' * 10000000 is 24 appends).
      std::string s;
      s.reserve(total);
      if (total > 0) s.append(a.str());
      while (s.size() < total) s.append(s, 0, std::min<uint64_t>(s.size(), total - s.size()));
      return Value::String(std::move(s));
    }
    VLS_RETURN_IF_ERROR(CheckItems(total, "'*' (list repetition)"));
    ValueList l;
    l.reserve(total);
    for (uint64_t i = 0; i < n && len > 0; ++i) l.insert(l.end(), a.list().begin(), a.list().end());
    return Value::List(std::move(l));
  }
  if (op == "%" && a.is_string())
    return Unimplemented("unsupported template feature '%' string formatting");
  if (!a.is_number() || !b.is_number()) return type_error();
  const bool fl = a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat;
  if (op == "/") {
    if (b.as_float() == 0) return InvalidArgument("division by zero");
    return Value::Float(a.as_float() / b.as_float());
  }
  if (fl) {
    const double x = a.as_float();
    const double y = b.as_float();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "**") return Value::Float(std::pow(x, y));
    if (y == 0) return InvalidArgument("float division by zero");
    if (op == "//") return Value::Float(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    return type_error();
  }
  const int64_t x = a.as_int();
  const int64_t y = b.as_int();
  int64_t r = 0;
  if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::Int(r);
  if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::Int(r);
  if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::Int(r);
  if (op == "//" || op == "%") {
    if (y == 0) return InvalidArgument("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return OutOfRange("integer overflow");
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return Value::Int(op == "//" ? q : m);
  }
  if (op == "**") {
    if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
    // Square and multiply: at most 2 * 63 multiplications whatever y is (1 ** 10**18 included).
    int64_t acc = 1;
    int64_t base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) != 0 && __builtin_mul_overflow(acc, base, &acc))
        return OutOfRange("integer overflow in **");
      if (e > 1 && __builtin_mul_overflow(base, base, &base))
        return OutOfRange("integer overflow in **");
    }
    return Value::Int(acc);
  }
  if (op == "+" || op == "-" || op == "*") return OutOfRange("integer overflow in " + op);
  return type_error();
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return InvalidArgument("'in <string>' requires string as left operand, not " +
                             item.TypeName());
    }
    return FindBytes(container.str(), item.str(), 0) != std::string::npos;
  }
  if (container.is_dict()) {
    SpendSteps(static_cast<int64_t>(container.dict().size()));
    return item.is_string() && container.Find(item.str()) != nullptr;
  }
  if (container.is_undefined()) return false;
  if (container.is_list()) {
    SpendSteps(static_cast<int64_t>(container.list().size()));
    for (const Value& v : container.list()) {
      if (Equal(v, item)) return true;
    }
    return false;
  }
  return InvalidArgument("argument of type '" + container.TypeName() + "' is not iterable");
}

class Evaluator {
 public:
  explicit Evaluator(RenderBudget* budget) : budget_(budget), limits_(budget->limits()) {}

  Status Exec(const Node& n, const ScopePtr& s, std::string* out) {
    VLS_RETURN_IF_ERROR(Enter(n));
    Status st = ExecImpl(n, s, out);
    --depth_;
    if (st.ok() && budget_->exhausted()) return Err(n, budget_->status());
    return st;
  }

  StatusOr<Value> Eval(const Node& n, const ScopePtr& s) {
    VLS_RETURN_IF_ERROR(Enter(n));
    StatusOr<Value> r = EvalImpl(n, s);
    --depth_;
    if (!r.ok()) return r;
    if (budget_->exhausted()) return Err(n, budget_->status());
    // Every value leaving an expression is held to the limits, so no string or nesting can grow
    // past them by steps the filters do not check themselves.
    if (r->is_string() && r->str().size() > static_cast<uint64_t>(limits_.max_output_bytes)) {
      return Err(n, CheckString(r->str().size(), "an expression"));
    }
    if (r->depth() > kMaxValueDepth) {
      return Err(n, ResourceExhausted("a value nests deeper than kMaxValueDepth (" +
                                      std::to_string(kMaxValueDepth) + ")"));
    }
    return r;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  // Steps of one loop iteration: it builds a scope and the 12 `loop` variables.
  static constexpr int64_t kLoopIterationSteps = 8;

  // One node: a step, one level of recursion.
  Status Enter(const Node& n) {
    if (!budget_->Spend(1)) return Err(n, budget_->status());
    if (++depth_ > limits_.max_depth) {
      --depth_;
      return Err(n, ResourceExhausted("evaluation nested deeper than kMaxRenderDepth (" +
                                      std::to_string(limits_.max_depth) + ")"));
    }
    if (const size_t left = stack_.BytesLeft(); left < kMinRenderStackBytes) {
      --depth_;
      return Err(n, ResourceExhausted("evaluation nested " + std::to_string(depth_) +
                                      " levels deep has " + std::to_string(left) +
                                      " bytes of this thread's stack left, under "
                                      "kMinRenderStackBytes (" +
                                      std::to_string(kMinRenderStackBytes) + ")"));
    }
    return Status::Ok();
  }

  // Appends to an output (the render's, a block's or a macro's), held to kMaxRenderOutputBytes.
  static Status Append(const Node& n, std::string_view text, std::string* out) {
    Status st = CheckGrowString(out->size() + text.size(), "the output", text.size());
    if (!st.ok()) return Err(n, st);
    out->append(text);
    return Status::Ok();
  }

  Status ExecImpl(const Node& n, const ScopePtr& s, std::string* out) {
    switch (n.kind) {
      case NodeKind::kBody:
        for (const auto& c : n.children) {
          VLS_RETURN_IF_ERROR(Exec(*c, s, out));
          if (flow_ != Flow::kNormal) break;
        }
        return Status::Ok();
      case NodeKind::kOutput:
        if (n.children.empty()) return Append(n, n.name, out);
        {
          VLS_ASSIGN_OR_RETURN(Value v, Eval(*n.children[0], s));
          if (v.is_string()) return Append(n, v.str(), out);
          return Append(n, v.ToString(), out);
        }
      case NodeKind::kIf: {
        // children: test, body pairs (if, elif...), then the else body if there is one.
        size_t i = 0;
        for (; i + 1 < n.children.size(); i += 2) {
          VLS_ASSIGN_OR_RETURN(Value t, Eval(*n.children[i], s));
          if (t.Truthy()) return Exec(*n.children[i + 1], s, out);
        }
        if (i < n.children.size()) return Exec(*n.children[i], s, out);
        return Status::Ok();
      }
      case NodeKind::kFor: return ExecFor(n, s, out);
      case NodeKind::kSet: {
        VLS_ASSIGN_OR_RETURN(Value v, Eval(*n.children[0], s));
        if (n.children.size() > 1) {  // ns.attr = v
          const Node& target = *n.children[1];
          const Value* ns = s->Lookup(target.children[0]->name);
          if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
            return Err(n, "cannot assign attribute on non-namespace object '" +
                              target.children[0]->name + "'");
          }
          // A namespace holding a namespace could hold itself: a reference cycle that would
          // leak, and nesting whose depth nothing tracks once either changes.
          if (v.holds_namespace()) return Err(n, "a namespace attribute cannot hold a namespace");
          ValueDict& d = ns->mutable_namespace();
          for (auto& kv : d) {
            if (kv.first == target.name) {
              kv.second = std::move(v);
              return Status::Ok();
            }
          }
          d.emplace_back(target.name, std::move(v));
          return Status::Ok();
        }
        return Assign(n, n.names, v, s.get());
      }
      case NodeKind::kSetBlock: {
        std::string body;
        VLS_RETURN_IF_ERROR(Exec(*n.children[0], s, &body));
        Value v = Value::String(std::move(body));
        if (n.children[1]) {
          VLS_ASSIGN_OR_RETURN(v, EvalFilterChain(*n.children[1], v, s));
        }
        s->Set(n.names[0], std::move(v));
        return Status::Ok();
      }
      case NodeKind::kFilterBlock: {
        std::string body;
        VLS_RETURN_IF_ERROR(Exec(*n.children[0], s, &body));
        VLS_ASSIGN_OR_RETURN(Value v,
                             EvalFilterChain(*n.children[1], Value::String(std::move(body)), s));
        return Append(n, v.ToString(), out);
      }
      case NodeKind::kMacro: s->Set(n.name, MakeMacro(n, s)); return Status::Ok();
      case NodeKind::kBreak:
      case NodeKind::kContinue:
        if (loop_depth_ == 0) return Err(n, "'break'/'continue' outside a loop");
        flow_ = n.kind == NodeKind::kBreak ? Flow::kBreak : Flow::kContinue;
        return Status::Ok();
      default: return Err(n, "internal: not a statement");
    }
  }

  static Status Err(const Node& n, const std::string& msg) {
    return InvalidArgument("template line " + std::to_string(n.line) + ": " + msg);
  }
  // `st` with the template line in front (once: errors from inside a macro already have one).
  static Status Err(const Node& n, const Status& st) {
    if (st.message().rfind("template line ", 0) == 0) return st;
    return Status(st.code(), "template line " + std::to_string(n.line) + ": " + st.message());
  }

  Status Assign(const Node& n, const std::vector<std::string>& names, const Value& v, Scope* s) {
    if (names.size() == 1) {
      s->Set(names[0], v);
      return Status::Ok();
    }
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (items.size() != names.size()) {
      return Err(n, "cannot unpack " + std::to_string(items.size()) + " values into " +
                        std::to_string(names.size()) + " names");
    }
    for (size_t i = 0; i < names.size(); ++i) s->Set(names[i], items[i]);
    return Status::Ok();
  }

  Status ExecFor(const Node& n, const ScopePtr& s, std::string* out) {
    VLS_ASSIGN_OR_RETURN(Value seq, Eval(*n.children[0], s));
    if (seq.is_undefined() && !seq.str().empty()) return UndefinedError(seq);
    // A list is iterated in place (lists are immutable and shared); dict keys and string
    // characters are materialised (and charged) by Iterate.
    ValueList storage;
    const ValueList* items = &storage;
    if (seq.is_list()) {
      items = &seq.list();
    } else {
      auto made = Iterate(seq);
      if (!made.ok()) return Err(n, made.status());
      storage = std::move(*made);
    }
    if (n.children[3]) {  // {% for x in xs if cond %}: filter before loop.length is known
      ValueList kept;
      for (const Value& item : *items) {
        auto scope = std::make_shared<Scope>();
        scope->parent = s;
        VLS_RETURN_IF_ERROR(Assign(n, n.names, item, scope.get()));
        VLS_ASSIGN_OR_RETURN(Value keep, Eval(*n.children[3], scope));
        if (keep.Truthy()) kept.push_back(item);
      }
      storage = std::move(kept);
      items = &storage;
    }
    const ValueList& list = *items;
    const auto len = static_cast<int64_t>(list.size());
    ++loop_depth_;
    static const Value kNoPrevious = Value::Undefined("there is no previous item");
    static const Value kNoNext = Value::Undefined("there is no next item");
    for (int64_t i = 0; i < len; ++i) {
      if (!budget_->Spend(kLoopIterationSteps)) {
        --loop_depth_;
        return Err(n, budget_->status());
      }
      auto scope = std::make_shared<Scope>();
      scope->parent = s;
      VLS_RETURN_IF_ERROR(Assign(n, n.names, list[i], scope.get()));
      ValueDict loop = {
          {"index", Value::Int(i + 1)},
          {"index0", Value::Int(i)},
          {"revindex", Value::Int(len - i)},
          {"revindex0", Value::Int(len - i - 1)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == len - 1)},
          {"length", Value::Int(len)},
          {"depth", Value::Int(loop_depth_)},
          {"depth0", Value::Int(loop_depth_ - 1)},
          {"previtem", i > 0 ? list[i - 1] : kNoPrevious},
          {"nextitem", i + 1 < len ? list[i + 1] : kNoNext},
      };
      loop.emplace_back("cycle", Value::Function("loop.cycle", [i](CallArgs& a) -> StatusOr<Value> {
                          if (a.positional.empty())
                            return InvalidArgument("no items for cycling given");
                          return a.positional[i % a.positional.size()];
                        }));
      scope->Set("loop", Value::Dict(std::move(loop)));
      VLS_RETURN_IF_ERROR(Exec(*n.children[1], scope, out));
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    --loop_depth_;
    if (len == 0 && n.children[2]) return Exec(*n.children[2], s, out);
    return Status::Ok();
  }

  Value MakeMacro(const Node& n, const ScopePtr& defining) {
    const Node* node = &n;
    std::weak_ptr<Scope> weak = defining;
    return Value::Function(n.name, [this, node, weak](CallArgs& a) -> StatusOr<Value> {
      ScopePtr parent = weak.lock();
      if (!parent) return InvalidArgument("macro '" + node->name + "' outlived its scope");
      if (a.positional.size() > node->names.size()) {
        return InvalidArgument("macro '" + node->name + "' takes not more than " +
                               std::to_string(node->names.size()) + " argument(s)");
      }
      if (++macro_depth_ > limits_.max_macro_depth) {
        --macro_depth_;
        return ResourceExhausted("macro '" + node->name +
                                 "' calls nest deeper than kMaxMacroDepth (" +
                                 std::to_string(limits_.max_macro_depth) + ")");
      }
      auto scope = std::make_shared<Scope>();
      scope->parent = parent;
      for (size_t i = 0; i < node->names.size(); ++i) {
        Value v;
        bool set = false;
        if (i < a.positional.size()) {
          v = a.positional[i];
          set = true;
        }
        for (auto& kw : a.keyword) {
          if (kw.first == node->names[i]) {
            v = kw.second;
            set = true;
          }
        }
        if (!set && node->args[i]) {
          auto d = Eval(*node->args[i], scope);
          if (!d.ok()) {
            --macro_depth_;
            return d.status();
          }
          v = *d;
        } else if (!set) {
          v = Value::Undefined("'" + node->names[i] + "' is undefined");
        }
        scope->Set(node->names[i], v);
      }
      for (auto& kw : a.keyword) {
        bool known = false;
        for (const auto& p : node->names) known = known || p == kw.first;
        if (!known) {
          --macro_depth_;
          return InvalidArgument("macro '" + node->name + "' takes no keyword argument '" +
                                 kw.first + "'");
        }
      }
      std::string out;
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      Status st = Exec(*node->children[0], scope, &out);
      loop_depth_ = saved_loops;
      flow_ = Flow::kNormal;
      --macro_depth_;
      if (!st.ok()) return st;
      return Value::String(std::move(out));
    });
  }

  Status EvalArgs(const Node& n, const ScopePtr& s, CallArgs* a) {
    for (const auto& e : n.args) {
      VLS_ASSIGN_OR_RETURN(Value v, Eval(*e, s));
      a->positional.push_back(std::move(v));
    }
    for (size_t i = 0; i < n.kwargs.size(); ++i) {
      VLS_ASSIGN_OR_RETURN(Value v, Eval(*n.kwargs[i], s));
      a->keyword.emplace_back(n.kwarg_names[i], std::move(v));
    }
    return Status::Ok();
  }

  // Applies a chain built by the parser for filter blocks (innermost operand is null).
  StatusOr<Value> EvalFilterChain(const Node& f, const Value& input, const ScopePtr& s) {
    Value operand = input;
    if (f.children[0]) {
      VLS_ASSIGN_OR_RETURN(operand, EvalFilterChain(*f.children[0], input, s));
    }
    CallArgs a;
    VLS_RETURN_IF_ERROR(EvalArgs(f, s, &a));
    auto r = ApplyFilter(f.name, operand, a);
    if (!r.ok()) return Err(f, r.status());
    return r;
  }

  StatusOr<Value> EvalImpl(const Node& n, const ScopePtr& s) {
    switch (n.kind) {
      case NodeKind::kLiteral: return n.value;
      case NodeKind::kName: {
        const Value* v = s->Lookup(n.name);
        if (v != nullptr) return *v;
        return Value::Undefined("'" + n.name + "' is undefined");
      }
      case NodeKind::kList:
      case NodeKind::kTuple: {
        ValueList items;
        for (const auto& c : n.children) {
          VLS_ASSIGN_OR_RETURN(Value v, Eval(*c, s));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items));
      }
      case NodeKind::kDict: {
        ValueDict d;
        for (size_t i = 0; i + 1 < n.children.size(); i += 2) {
          VLS_ASSIGN_OR_RETURN(Value k, Eval(*n.children[i], s));
          if (!k.is_string()) return Err(n, "unsupported template feature: non-string dict keys");
          VLS_ASSIGN_OR_RETURN(Value v, Eval(*n.children[i + 1], s));
          bool replaced = false;
          for (auto& kv : d) {
            if (kv.first == k.str()) {
              kv.second = v;
              replaced = true;
            }
          }
          if (!replaced) d.emplace_back(k.str(), std::move(v));
        }
        return Value::Dict(std::move(d));
      }
      case NodeKind::kGetAttr: {
        VLS_ASSIGN_OR_RETURN(Value obj, Eval(*n.children[0], s));
        if (obj.is_undefined()) return Err(n, UndefinedError(obj).message());
        return GetAttribute(obj, n.name);
      }
      case NodeKind::kGetItem: {
        VLS_ASSIGN_OR_RETURN(Value obj, Eval(*n.children[0], s));
        VLS_ASSIGN_OR_RETURN(Value key, Eval(*n.children[1], s));
        if (obj.is_undefined()) return Err(n, UndefinedError(obj).message());
        return GetItem(obj, key);
      }
      case NodeKind::kSlice: {
        VLS_ASSIGN_OR_RETURN(Value obj, Eval(*n.children[0], s));
        if (obj.is_undefined()) return Err(n, UndefinedError(obj).message());
        CallArgs a;
        for (int i = 1; i <= 3; ++i) {
          Value v = Value::None();
          if (n.children[i]) {
            VLS_ASSIGN_OR_RETURN(v, Eval(*n.children[i], s));
          }
          a.positional.push_back(v);
        }
        auto r = ApplyFilter("__slice__", obj, a);
        if (!r.ok()) return Err(n, r.status());
        return r;
      }
      case NodeKind::kCall: {
        VLS_ASSIGN_OR_RETURN(Value f, Eval(*n.children[0], s));
        if (f.is_undefined()) return Err(n, UndefinedError(f).message());
        if (f.kind() != Value::Kind::kFunction)
          return Err(n, "'" + f.TypeName() + "' object is not callable");
        CallArgs a;
        VLS_RETURN_IF_ERROR(EvalArgs(n, s, &a));
        auto r = f.fn()(a);
        if (!r.ok()) return Err(n, r.status());
        return r;
      }
      case NodeKind::kFilter: {
        VLS_ASSIGN_OR_RETURN(Value operand, Eval(*n.children[0], s));
        CallArgs a;
        VLS_RETURN_IF_ERROR(EvalArgs(n, s, &a));
        auto r = ApplyFilter(n.name, operand, a);
        if (!r.ok()) return Err(n, r.status());
        return r;
      }
      case NodeKind::kTest: {
        VLS_ASSIGN_OR_RETURN(Value operand, Eval(*n.children[0], s));
        CallArgs a;
        VLS_RETURN_IF_ERROR(EvalArgs(n, s, &a));
        auto r = ApplyTest(n.name, operand, a);
        if (!r.ok()) return Err(n, r.status());
        return Value::Bool(*r != n.negated);
      }
      case NodeKind::kUnary: {
        VLS_ASSIGN_OR_RETURN(Value v, Eval(*n.children[0], s));
        if (n.name == "not") return Value::Bool(!v.Truthy());
        if (v.is_undefined()) return Err(n, UndefinedError(v).message());
        if (!v.is_number())
          return Err(n, "bad operand type for unary " + n.name + ": '" + v.TypeName() + "'");
        if (n.name == "+") return v.kind() == Value::Kind::kBool ? Value::Int(v.as_int()) : v;
        if (v.kind() == Value::Kind::kFloat) return Value::Float(-v.as_float());
        if (v.as_int() == INT64_MIN) return Err(n, "integer overflow");
        return Value::Int(-v.as_int());
      }
      case NodeKind::kBinary: {
        VLS_ASSIGN_OR_RETURN(Value a, Eval(*n.children[0], s));
        if (n.name == "and") return a.Truthy() ? Eval(*n.children[1], s) : StatusOr<Value>(a);
        if (n.name == "or") return a.Truthy() ? StatusOr<Value>(a) : Eval(*n.children[1], s);
        VLS_ASSIGN_OR_RETURN(Value b, Eval(*n.children[1], s));
        if (n.name == "~") {
          std::string left = a.ToString();
          std::string right = b.ToString();
          Status st = CheckString(left.size() + right.size(), "'~'");
          if (!st.ok()) return Err(n, st);
          return Value::String(std::move(left) + right);
        }
        auto r = Arith(n.name, a, b);
        if (!r.ok()) return Err(n, r.status());
        return r;
      }
      case NodeKind::kCompare: {
        VLS_ASSIGN_OR_RETURN(Value left, Eval(*n.children[0], s));
        for (size_t i = 0; i < n.names.size(); ++i) {
          VLS_ASSIGN_OR_RETURN(Value right, Eval(*n.children[i + 1], s));
          const std::string& op = n.names[i];
          StatusOr<bool> r = false;
          if (op == "==") {
            r = Equal(left, right);
          } else if (op == "!=") {
            r = !Equal(left, right);
          } else if (op == "in" || op == "notin") {
            r = Contains(right, left);
            if (r.ok() && op == "notin") r = !*r;
          } else {
            if (left.is_undefined()) return Err(n, UndefinedError(left).message());
            if (right.is_undefined()) return Err(n, UndefinedError(right).message());
            if (op == "<") r = Less(left, right);
            if (op == ">") r = Less(right, left);
            if (op == "<=") {
              r = Less(right, left);
              if (r.ok()) r = !*r;
            }
            if (op == ">=") {
              r = Less(left, right);
              if (r.ok()) r = !*r;
            }
          }
          if (!r.ok()) return Err(n, r.status());
          if (!*r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case NodeKind::kCondExpr: {
        VLS_ASSIGN_OR_RETURN(Value t, Eval(*n.children[1], s));
        if (t.Truthy()) return Eval(*n.children[0], s);
        if (n.children[2]) return Eval(*n.children[2], s);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
      default: return Err(n, "internal: not an expression");
    }
  }

  RenderBudget* budget_;
  const RenderLimits& limits_;
  StackGuard stack_;
  Flow flow_ = Flow::kNormal;
  int loop_depth_ = 0;
  int depth_ = 0;
  int macro_depth_ = 0;
};

ValueDict Builtins() {
  ValueDict g;
  g.emplace_back(
      "raise_exception", Value::Function("raise_exception", [](CallArgs& a) -> StatusOr<Value> {
        return InvalidArgument("raise_exception: " +
                               (a.positional.empty() ? std::string() : a.positional[0].ToString()));
      }));
  g.emplace_back("namespace", Value::Function("namespace", [](CallArgs& a) -> StatusOr<Value> {
                   ValueDict d;
                   if (!a.positional.empty()) {
                     if (!a.positional[0].is_dict())
                       return InvalidArgument("namespace() takes a mapping");
                     d = a.positional[0].dict();
                   }
                   for (auto& kv : a.keyword) d.emplace_back(kv.first, kv.second);
                   for (const auto& kv : d) {
                     if (kv.second.holds_namespace())
                       return InvalidArgument("a namespace attribute cannot hold a namespace");
                   }
                   return Value::Namespace(std::move(d));
                 }));
  g.emplace_back("dict", Value::Function("dict", [](CallArgs& a) -> StatusOr<Value> {
                   ValueDict d;
                   if (!a.positional.empty()) {
                     if (!a.positional[0].is_dict())
                       return InvalidArgument("dict() takes a mapping");
                     d = a.positional[0].dict();
                   }
                   for (auto& kv : a.keyword) d.emplace_back(kv.first, kv.second);
                   return Value::Dict(std::move(d));
                 }));
  g.emplace_back("range", Value::Function("range", [](CallArgs& a) -> StatusOr<Value> {
                   int64_t start = 0;
                   int64_t stop = 0;
                   int64_t step = 1;
                   for (const Value& v : a.positional) {
                     if (!v.is_number() || v.kind() == Value::Kind::kFloat) {
                       return InvalidArgument("range() arguments must be integers");
                     }
                   }
                   if (a.positional.size() == 1) {
                     stop = a.positional[0].as_int();
                   } else if (a.positional.size() >= 2) {
                     start = a.positional[0].as_int();
                     stop = a.positional[1].as_int();
                     if (a.positional.size() == 3) step = a.positional[2].as_int();
                   } else {
                     return InvalidArgument("range expected at least 1 argument");
                   }
                   if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
                   // Python's len(range(...)), computed (in unsigned 64-bit: the distance
                   // between two int64 fits) before anything is built, so that the budget
                   // refuses range(10**18) without materialising it.
                   const bool up = step > 0;
                   const bool empty = up ? start >= stop : start <= stop;
                   const uint64_t span =
                       empty ? 0
                       : up  ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                             : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
                   const uint64_t abs_step =
                       up ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
                   const uint64_t count = span / abs_step + (span % abs_step != 0 ? 1 : 0);
                   VLS_RETURN_IF_ERROR(CheckItems(count, "range()"));
                   ValueList l;
                   l.reserve(count);
                   for (uint64_t k = 0; k < count; ++k) {
                     l.push_back(Value::Int(static_cast<int64_t>(static_cast<uint64_t>(start) +
                                                                 k * static_cast<uint64_t>(step))));
                   }
                   return Value::List(std::move(l));
                 }));
  g.emplace_back(
      "strftime_now", Value::Function("strftime_now", [](CallArgs& a) -> StatusOr<Value> {
        if (a.positional.empty() || !a.positional[0].is_string()) {
          return InvalidArgument("strftime_now() takes a format string");
        }
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), a.positional[0].str().c_str(), &tm);
        return Value::String(std::string(buf, n));
      }));
  return g;
}

}  // namespace

StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    VLS_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source, LexOptions{}));
    VLS_ASSIGN_OR_RETURN(NodePtr root, jinja::Parse(tokens));
    Template t;
    t.root_ = std::shared_ptr<const Node>(std::move(root));
    return t;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory while parsing the chat template");
  }
}

StatusOr<std::string> Template::Render(const ValueDict& globals, const RenderLimits& limits) const {
  if (!root_) return FailedPrecondition("Template::Render on a template that was not parsed");
  RenderBudget budget(limits);
  for (const auto& kv : globals) {
    if (kv.second.depth() > kMaxValueDepth) {
      return ResourceExhausted("template variable '" + kv.first +
                               "' nests deeper than kMaxValueDepth (" +
                               std::to_string(kMaxValueDepth) + ")");
    }
  }
  try {
    auto builtins = std::make_shared<Scope>();
    builtins->vars = Builtins();
    auto top = std::make_shared<Scope>();
    top->parent = builtins;
    top->vars = globals;
    Evaluator ev(&budget);
    std::string out;
    VLS_RETURN_IF_ERROR(ev.Exec(*root_, top, &out));
    VLS_RETURN_IF_ERROR(budget.status());
    return out;
  } catch (const std::bad_alloc&) {
    // The budgets keep a render far below any sane memory limit; this is the last line.
    return ResourceExhausted("out of memory while rendering the chat template");
  }
}

}  // namespace vls::jinja
