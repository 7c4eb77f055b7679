#include "tokenizer/jinja_value.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tokenizer/jinja_budget.h"
#include "tokenizer/utf8.h"

namespace vls::jinja {
namespace {

void AppendHex(unsigned v, int digits, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int d = digits - 1; d >= 0; --d) out->push_back(kHex[(v >> (4 * d)) & 0xF]);
}

bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR: return false;
    default: return true;
  }
}

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    const char32_t c = tok::NextCodePoint(s, &i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!IsPrintable(c)) {
      if (c < 0x100) {
        out += "\\x";
        AppendHex(c, 2, &out);
      } else if (c < 0x10000) {
        out += "\\u";
        AppendHex(c, 4, &out);
      } else {
        out += "\\U";
        AppendHex(c, 8, &out);
      }
    } else {
      tok::AppendUtf8(c, &out);
    }
  }
  out.push_back(quote);
  return out;
}

// Appends the JSON text of `s`; stops (returning false) once `out` passes `max` bytes.
bool AppendJsonString(const std::string& s, size_t max, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    if (out->size() > max) return false;
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += "\\u";
          AppendHex(c, 4, out);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
  return out->size() <= max;
}

Status TooLong(size_t max) {
  return ResourceExhausted("tojson would build a string past kMaxRenderOutputBytes (" +
                           std::to_string(max) + " bytes)");
}

// Recursion is bounded by the value's depth (kMaxValueDepth); the text by `max` bytes, checked
// before each indentation is written (indent * level can be large).
Status ToJsonImpl(const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                  const std::string& key_sep, int level, size_t max, std::string* out) {
  if (out->size() > max) return TooLong(max);
  if (!SpendSteps(1)) return Status::Ok();  // the render fails with the budget's error
  auto newline = [&](int lvl) -> Status {
    if (indent < 0) return Status::Ok();
    const uint64_t pad = static_cast<uint64_t>(indent) * static_cast<uint64_t>(lvl);
    if (pad > max || out->size() + 1 + pad > max) return TooLong(max);
    out->push_back('\n');
    out->append(pad, ' ');
    return Status::Ok();
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return Status::Ok();
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return Status::Ok();
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return Status::Ok();
    case Value::Kind::kFloat: {
      const double f = v.as_float();
      if (std::isnan(f)) {
        *out += "NaN";
      } else if (std::isinf(f)) {
        *out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FloatRepr(f);
      }
      return Status::Ok();
    }
    case Value::Kind::kString:
      if (!AppendJsonString(v.str(), max, out)) return TooLong(max);
      return Status::Ok();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return Status::Ok();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        VLS_RETURN_IF_ERROR(newline(level + 1));
        VLS_RETURN_IF_ERROR(
            ToJsonImpl(v.list()[i], indent, sort_keys, item_sep, key_sep, level + 1, max, out));
      }
      VLS_RETURN_IF_ERROR(newline(level));
      out->push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      if (v.dict().empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict()) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        VLS_RETURN_IF_ERROR(newline(level + 1));
        if (!AppendJsonString(items[i]->first, max, out)) return TooLong(max);
        *out += key_sep;
        VLS_RETURN_IF_ERROR(ToJsonImpl(items[i]->second, indent, sort_keys, item_sep, key_sep,
                                       level + 1, max, out));
      }
      VLS_RETURN_IF_ERROR(newline(level));
      out->push_back('}');
      return Status::Ok();
    }
    default:
      return InvalidArgument("tojson: Object of type " + v.TypeName() +
                             " is not JSON serializable");
  }
}

}  // namespace

const std::string& Value::EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value& i : items) {
    v.depth_ = std::max(v.depth_, i.depth_);
    v.holds_namespace_ = v.holds_namespace_ || i.holds_namespace_;
  }
  ++v.depth_;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::Dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& kv : items) {
    v.depth_ = std::max(v.depth_, kv.second.depth_);
    v.holds_namespace_ = v.holds_namespace_ || kv.second.holds_namespace_;
  }
  ++v.depth_;
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}
Value Value::Namespace(ValueDict items) {
  // Its attributes change later (never to hold a namespace: jinja_eval.cc), so its depth is
  // that of its creation; what is assigned later is held to kMaxValueDepth on its own.
  Value v = Dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  v.holds_namespace_ = true;
  return v;
}
Value Value::Function(std::string name, NativeFn fn, const Value* bound) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const NativeFn>(std::move(fn));
  if (bound != nullptr) {
    v.depth_ = bound->depth_ + 1;
    v.holds_namespace_ = bound->holds_namespace_;
  }
  return v;
}

namespace {

// JSON -> Value with an explicit depth (the recursion bound) and a count of values made.
StatusOr<Value> FromJsonImpl(const nlohmann::ordered_json& j, std::string_view what, int depth,
                             int max_depth, int64_t* count) {
  using J = nlohmann::ordered_json;
  if (++*count > kMaxTemplateInputValues) {
    return ResourceExhausted(std::string(what) + " holds more than kMaxTemplateInputValues (" +
                             std::to_string(kMaxTemplateInputValues) + ") values");
  }
  switch (j.type()) {
    case J::value_t::null: return Value::None();
    case J::value_t::boolean: return Value::Bool(j.get<bool>());
    case J::value_t::number_integer: return Value::Int(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case J::value_t::number_float: return Value::Float(j.get<double>());
    case J::value_t::string: return Value::String(j.get<std::string>());
    case J::value_t::array:
    case J::value_t::object: {
      if (depth >= max_depth) {
        return ResourceExhausted(std::string(what) + " nests deeper than kMaxValueDepth (" +
                                 std::to_string(max_depth) + ")");
      }
      if (j.is_array()) {
        ValueList items;
        items.reserve(j.size());
        for (const auto& e : j) {
          VLS_ASSIGN_OR_RETURN(Value v, FromJsonImpl(e, what, depth + 1, max_depth, count));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items));
      }
      // ordered_json keeps one entry per key (the last value), as Python's json does.
      ValueDict items;
      items.reserve(j.size());
      for (const auto& entry : j.items()) {
        VLS_ASSIGN_OR_RETURN(Value v,
                             FromJsonImpl(entry.value(), what, depth + 1, max_depth, count));
        items.emplace_back(entry.key(), std::move(v));
      }
      return Value::Dict(std::move(items));
    }
    default: return Value::None();
  }
}

}  // namespace

StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& j, std::string_view what,
                                int max_depth) {
  int64_t count = 0;
  try {
    return FromJsonImpl(j, what, 0, max_depth, &count);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(what) + ": out of memory converting JSON");
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !str().empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    default: return true;
  }
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+05"
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + out + ebuf;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return str();
    default: return Repr();
  }
}

namespace {

// Appends repr(v), stopping once `out` passes `max` bytes (recursion: the value's depth).
void AppendRepr(const Value& v, size_t max, std::string* out) {
  if (out->size() > max || !SpendSteps(1)) return;
  switch (v.kind()) {
    case Value::Kind::kList:
      out->push_back('[');
      for (size_t i = 0; i < v.list().size() && out->size() <= max; ++i) {
        if (i > 0) *out += ", ";
        AppendRepr(v.list()[i], max, out);
      }
      out->push_back(']');
      return;
    case Value::Kind::kDict:
      out->push_back('{');
      for (size_t i = 0; i < v.dict().size() && out->size() <= max; ++i) {
        if (i > 0) *out += ", ";
        *out += StringRepr(v.dict()[i].first);
        *out += ": ";
        AppendRepr(v.dict()[i].second, max, out);
      }
      out->push_back('}');
      return;
    case Value::Kind::kString:
      // repr of one string is at most 10 bytes per input byte (\U0001xxxx for 4 bytes).
      if (v.str().size() > max) {  // too long for any repr: fill to max + 1 bytes
        out->append(max + 1 - out->size(), '.');
        return;
      }
      *out += StringRepr(v.str());
      return;
    default: *out += v.Repr(); return;
  }
}

}  // namespace

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return FloatRepr(f_);
    case Kind::kString:
    case Kind::kList:
    case Kind::kDict: {
      std::string out;
      AppendRepr(*this, MaxStringBytes(), &out);
      return out;
    }
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kFunction: return "<function " + str() + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunction: return "function";
  }
  return "object";
}

const Value* Value::Find(std::string_view key) const {
  if (!is_dict()) return nullptr;
  for (const auto& kv : *dict_) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

StatusOr<std::string> Value::ToJson(int indent, bool sort_keys, const std::string& item_sep,
                                    const std::string& key_sep) const {
  std::string out;
  VLS_RETURN_IF_ERROR(
      ToJsonImpl(*this, indent, sort_keys, item_sep, key_sep, 0, MaxStringBytes(), &out));
  return out;
}

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (!SpendSteps(1)) return false;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString:
      SpendBytes(std::min(a.str().size(), b.str().size()));
      return a.str() == b.str();
    case K::kList:
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    case K::kDict:
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& kv : a.dict()) {
        const Value* o = b.Find(kv.first);
        if (o == nullptr || !Equal(kv.second, *o)) return false;
      }
      return true;
    default: return &a == &b;
  }
}

StatusOr<bool> Less(const Value& a, const Value& b) {
  if (!SpendSteps(1)) return false;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.as_float() < b.as_float();
    }
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) {
    SpendBytes(std::min(a.str().size(), b.str().size()));
    return a.str() < b.str();
  }
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (!Equal(a.list()[i], b.list()[i])) return Less(a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size();
  }
  return InvalidArgument("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                         b.TypeName() + "'");
}

size_t FindBytes(std::string_view haystack, std::string_view needle, size_t pos) {
  if (pos > haystack.size()) return std::string::npos;
  if (needle.empty()) return pos;
  // One byte: memchr. Besides being the fastest search, its sanitizer interceptor checks the
  // bytes up to the match, where memmem's checks the whole rest of the haystack on every call
  // (split('a') of 10 MB took two minutes under ASan).
  const void* at =
      needle.size() == 1
          ? memchr(haystack.data() + pos, needle[0], haystack.size() - pos)
          : memmem(haystack.data() + pos, haystack.size() - pos, needle.data(), needle.size());
  return at == nullptr ? std::string::npos
                       : static_cast<size_t>(static_cast<const char*>(at) - haystack.data());
}

bool IsPySpace(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace vls::jinja
