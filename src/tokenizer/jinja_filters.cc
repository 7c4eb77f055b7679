// Jinja filters and tests (the ones chat templates use; others are refused by name).
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_budget.h"
#include "tokenizer/jinja_template.h"
#include "tokenizer/utf8.h"

namespace vls::jinja {
namespace {

const Value* Arg(const CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  for (const auto& kw : a.keyword) {
    if (kw.first == name) return &kw.second;
  }
  return nullptr;
}

// Attribute path "a.b" as Jinja's make_attrgetter resolves it.
Value Attr(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    cur = GetItem(cur, Value::String(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

StatusOr<Value> CallMethod(const Value& obj, const std::string& name, std::vector<Value> args) {
  Value m = GetAttribute(obj, name);
  if (m.kind() != Value::Kind::kFunction) return InvalidArgument("no method " + name);
  CallArgs a;
  a.positional = std::move(args);
  return m.fn()(a);
}

// Python slicing of a list of `n` items: the selected indices.
StatusOr<std::vector<int64_t>> SliceIndices(int64_t n, const Value& start, const Value& stop,
                                            const Value& step) {
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !(v->is_number() && v->kind() != Value::Kind::kFloat)) {
      return InvalidArgument("slice indices must be integers or None");
    }
  }
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) return InvalidArgument("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

StatusOr<Value> Select(const Value& seq, CallArgs& a, bool by_attr, bool keep) {
  if (!seq.Truthy()) return Value::List({});  // Jinja's select family guards with `if value`
  VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(seq));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string())
      return InvalidArgument("selectattr needs an attribute name");
    attr = a.positional[0].str();
    next = 1;
  }
  std::string test;
  if (a.positional.size() > next) test = a.positional[next].ToString();
  CallArgs test_args;
  for (size_t i = next + 1; i < a.positional.size(); ++i)
    test_args.positional.push_back(a.positional[i]);
  ValueList out;
  for (const Value& item : items) {
    const Value subject = by_attr ? Attr(item, attr) : item;
    bool ok = false;
    if (test.empty()) {
      ok = subject.Truthy();
    } else {
      CallArgs copy = test_args;
      VLS_ASSIGN_OR_RETURN(ok, ApplyTest(test, subject, copy));
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

StatusOr<Value> Sort(ValueList items, bool reverse, const std::string& attr) {
  Status err;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value a = attr.empty() ? x : Attr(x, attr);
    const Value b = attr.empty() ? y : Attr(y, attr);
    // Jinja sorts strings case-insensitively by default.
    auto key = [](const Value& v) {
      if (!v.is_string()) return v;
      std::string s = v.str();
      std::transform(s.begin(), s.end(), s.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      return Value::String(s);
    };
    auto r = Less(key(a), key(b));
    if (!r.ok()) {
      err = r.status();
      return false;
    }
    return *r;
  });
  VLS_RETURN_IF_ERROR(err);
  if (reverse) std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

}  // namespace

StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "__slice__") {
    if (v.is_list() || v.is_string()) {
      ValueList items;
      if (v.is_list()) {
        items = v.list();
      } else {
        VLS_ASSIGN_OR_RETURN(items, Iterate(v));
      }
      VLS_ASSIGN_OR_RETURN(auto idx,
                           SliceIndices(static_cast<int64_t>(items.size()), a.positional[0],
                                        a.positional[1], a.positional[2]));
      ValueList out;
      for (int64_t i : idx) out.push_back(items[i]);
      if (v.is_list()) return Value::List(std::move(out));
      std::string s;
      for (const Value& c : out) s += c.str();
      return Value::String(std::move(s));
    }
    return InvalidArgument("'" + v.TypeName() + "' object is not subscriptable");
  }
  if (name == "tojson") {
    // transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
    // sort_keys=sort_keys).
    const Value* indent = Arg(a, 1, "indent");
    const Value* seps = Arg(a, 2, "separators");
    const Value* sort = Arg(a, 3, "sort_keys");
    // Python indents by max(0, n) spaces per level; anything past the string limit cannot
    // be written (ToJson checks each indentation before writing it).
    const int ind =
        indent != nullptr && !indent->is_none()
            ? static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, int64_t{1} << 30))
            : -1;
    std::string item_sep = ind >= 0 ? "," : ", ";
    std::string key_sep = ": ";
    if (seps != nullptr && seps->is_list() && seps->list().size() == 2) {
      item_sep = seps->list()[0].ToString();
      key_sep = seps->list()[1].ToString();
    }
    VLS_ASSIGN_OR_RETURN(std::string s,
                         v.ToJson(ind, sort != nullptr && sort->Truthy(), item_sep, key_sep));
    return Value::String(std::move(s));
  }
  if (v.is_undefined() && name != "default" && name != "d" && name != "length" && name != "count" &&
      name != "string" && name != "list" && name != "join" && name != "trim") {
    return InvalidArgument(v.str().empty() ? "undefined value used" : v.str());
  }
  if (name == "trim") {
    const Value* chars = Arg(a, 0, "chars");
    return CallMethod(Value::String(v.ToString()), "strip",
                      chars ? std::vector<Value>{*chars} : std::vector<Value>{});
  }
  if (name == "length" || name == "count") {
    VLS_ASSIGN_OR_RETURN(int64_t n, Length(v));
    return Value::Int(n);
  }
  if (name == "default" || name == "d") {
    const Value* def = Arg(a, 0, "default_value");
    const Value* boolean = Arg(a, 1, "boolean");
    const bool use_default =
        v.is_undefined() || (boolean != nullptr && boolean->Truthy() && !v.Truthy());
    if (!use_default) return v;
    return def != nullptr ? *def : Value::String("");
  }
  if (name == "string") return Value::String(v.ToString());
  if (name == "upper" || name == "lower") return CallMethod(Value::String(v.ToString()), name, {});
  if (name == "capitalize" || name == "title")
    return CallMethod(Value::String(v.ToString()), name, {});
  if (name == "replace") {
    std::vector<Value> args = a.positional;
    if (const Value* c = Arg(a, 2, "count")) {
      args.resize(2);
      args.push_back(*c);
    }
    return CallMethod(Value::String(v.ToString()), "replace", args);
  }
  if (name == "join") {
    const Value* sep = Arg(a, 0, "d");
    const Value* attr = Arg(a, 1, "attribute");
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    const std::string separator = sep != nullptr ? sep->ToString() : std::string();
    std::vector<std::string> parts;
    parts.reserve(items.size());
    uint64_t total = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      parts.push_back((attr != nullptr ? Attr(items[i], attr->ToString()) : items[i]).ToString());
      total += parts.back().size() + (i > 0 ? separator.size() : 0);
      VLS_RETURN_IF_ERROR(CheckString(total, "join"));
    }
    std::string out;
    out.reserve(total);
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) out += separator;
      out += parts[i];
    }
    return Value::String(std::move(out));
  }
  if (name == "list") {
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    return Value::List(std::move(items));
  }
  if (name == "first" || name == "last") {
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      VLS_ASSIGN_OR_RETURN(ValueList chars, Iterate(v));
      std::string s;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) s += it->str();
      return Value::String(s);
    }
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "items") {
    if (!v.is_dict()) return InvalidArgument("items filter needs a mapping");
    return CallMethod(v, "items", {});
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return InvalidArgument("dictsort filter needs a mapping");
    VLS_ASSIGN_OR_RETURN(Value items, CallMethod(v, "items", {}));
    return Sort(items.list(), false, "0");
  }
  if (name == "sort") {
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    const Value* rev = Arg(a, 0, "reverse");
    const Value* attr = Arg(a, 2, "attribute");
    return Sort(std::move(items), rev != nullptr && rev->Truthy(),
                attr != nullptr ? attr->ToString() : "");
  }
  if (name == "unique") {
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    ValueList out;
    for (const Value& x : items) {
      // Quadratic: Equal spends a step per comparison; stop as soon as the budget is gone.
      if (RenderBudget* b = RenderBudget::Current(); b != nullptr && b->exhausted()) {
        return b->status();
      }
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); }))
        out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "map") {
    if (!v.Truthy()) return Value::List({});  // Jinja's map guards with `if value`
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    const Value* attr = nullptr;
    for (const auto& kw : a.keyword) {
      if (kw.first == "attribute") attr = &kw.second;
    }
    ValueList out;
    for (const Value& x : items) {
      if (attr != nullptr) {
        Value r = Attr(x, attr->ToString());
        if (r.is_undefined()) {
          for (const auto& kw : a.keyword) {
            if (kw.first == "default") r = kw.second;
          }
        }
        out.push_back(r);
      } else {
        if (a.positional.empty()) return InvalidArgument("map needs a filter name or attribute=");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        VLS_ASSIGN_OR_RETURN(Value r, ApplyFilter(a.positional[0].ToString(), x, rest));
        out.push_back(r);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "select" || name == "reject") return Select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return Select(v, a, true, name == "selectattr");
  if (name == "int") {
    if (v.is_number())
      return Value::Int(v.kind() == Value::Kind::kFloat ? static_cast<int64_t>(v.as_float())
                                                        : v.as_int());
    if (v.is_string()) {
      char* end = nullptr;
      const long long r = std::strtoll(v.str().c_str(), &end, 10);
      if (end != v.str().c_str() && *end == '\0') return Value::Int(r);
    }
    const Value* def = Arg(a, 0, "default");
    return def != nullptr ? *def : Value::Int(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value::Float(v.as_float());
    if (v.is_string()) {
      char* end = nullptr;
      const double r = std::strtod(v.str().c_str(), &end);
      if (end != v.str().c_str() && *end == '\0') return Value::Float(r);
    }
    const Value* def = Arg(a, 0, "default");
    return def != nullptr ? *def : Value::Float(0);
  }
  if (name == "abs") {
    if (!v.is_number()) return InvalidArgument("bad operand type for abs()");
    if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.as_float()));
    if (v.as_int() == INT64_MIN) return OutOfRange("integer overflow in abs()");
    return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "safe") return v;
  if (name == "indent") {
    const Value* width = Arg(a, 0, "width");
    const Value* first = Arg(a, 1, "first");
    const Value* blank = Arg(a, 2, "blank");
    const std::string s = v.ToString();
    // The pad and the result are sized before anything is built: indent(10**9) must not
    // allocate a gigabyte of spaces first.
    const uint64_t pad_size = width == nullptr ? 4
                              : width->is_string()
                                  ? width->str().size()
                                  : static_cast<uint64_t>(std::max<int64_t>(0, width->as_int()));
    VLS_RETURN_IF_ERROR(CheckString(pad_size, "indent"));
    uint64_t padded_lines = 0;
    {
      size_t start = 0;
      bool first_line = true;
      while (start <= s.size()) {
        const size_t nl = s.find('\n', start);
        const bool empty = nl == start || (nl == std::string::npos && start == s.size());
        if (first_line ? (first != nullptr && first->Truthy())
                       : (!empty || (blank != nullptr && blank->Truthy()))) {
          ++padded_lines;
        }
        if (nl == std::string::npos) break;
        start = nl + 1;
        first_line = false;
      }
    }
    const uint64_t total = padded_lines > 0 && pad_size > UINT64_MAX / padded_lines
                               ? UINT64_MAX
                               : s.size() + pad_size * padded_lines;
    VLS_RETURN_IF_ERROR(CheckString(total, "indent"));
    const std::string pad =
        width != nullptr && width->is_string() ? width->str() : std::string(pad_size, ' ');
    std::string out;
    out.reserve(total);
    size_t start = 0;
    bool first_line = true;
    while (start <= s.size()) {
      const size_t nl = s.find('\n', start);
      const std::string line =
          s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      const bool indent_it = first_line ? (first != nullptr && first->Truthy())
                                        : (!line.empty() || (blank != nullptr && blank->Truthy()));
      if (indent_it) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Value::String(out);
  }
  return Unimplemented("unsupported template filter '" + name + "'");
}

StatusOr<bool> ApplyTest(const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  const Value* arg = Arg(a, 0, "");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind() == K::kDict;
  if (name == "sequence") return v.is_list() || v.is_string() || v.kind() == K::kDict;
  if (name == "iterable")
    return v.is_list() || v.is_string() || v.kind() == K::kDict || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "eq" || name == "equalto" || name == "==" || name == "sameas") {
    if (arg == nullptr) return InvalidArgument("test '" + name + "' needs an argument");
    if (name == "sameas" && v.kind() != arg->kind()) return false;
    return Equal(v, *arg);
  }
  if (name == "ne" || name == "!=") {
    if (arg == nullptr) return InvalidArgument("test '" + name + "' needs an argument");
    return !Equal(v, *arg);
  }
  if (name == "lt" || name == "gt" || name == "le" || name == "ge" || name == "lessthan" ||
      name == "greaterthan") {
    if (arg == nullptr) return InvalidArgument("test '" + name + "' needs an argument");
    if (name == "lt" || name == "lessthan") return Less(v, *arg);
    if (name == "gt" || name == "greaterthan") return Less(*arg, v);
    VLS_ASSIGN_OR_RETURN(bool r, name == "le" ? Less(*arg, v) : Less(v, *arg));
    return !r;
  }
  if (name == "in") {
    if (arg == nullptr) return InvalidArgument("test 'in' needs an argument");
    if (arg->is_string() && v.is_string()) return arg->str().find(v.str()) != std::string::npos;
    if (arg->is_dict()) return v.is_string() && arg->Find(v.str()) != nullptr;
    VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(*arg));
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return Equal(x, v); });
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_number() || v.kind() == K::kFloat)
      return InvalidArgument("test '" + name + "' needs an integer");
    if (name == "divisibleby") {
      if (arg == nullptr || !arg->is_number() || arg->as_int() == 0)
        return InvalidArgument("divisibleby needs a non-zero number");
      return v.as_int() % arg->as_int() == 0;
    }
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    CallArgs none;
    Value m = GetAttribute(v, name == "lower" ? "islower" : "isupper");
    VLS_ASSIGN_OR_RETURN(Value r, m.fn()(none));
    return r.as_bool();
  }
  return Unimplemented("unsupported template test '" + name + "'");
}

}  // namespace vls::jinja
