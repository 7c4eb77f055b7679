// Filters, tests, attribute lookup and the Python str/dict/list methods templates call.
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_budget.h"
#include "tokenizer/jinja_template.h"
#include "tokenizer/utf8.h"

namespace vls::jinja {
namespace {

std::u32string ToU32(std::string_view s) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) out.push_back(tok::NextCodePoint(s, &i));
  return out;
}
std::string FromU32(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) tok::AppendUtf8(c, &out);
  return out;
}

std::string CaseMap(const std::string& s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (upper) {
    u.toUpper(icu::Locale::getRoot());
  } else {
    u.toLower(icu::Locale::getRoot());
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

// str.strip family; `chars` null means Python whitespace.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = ToU32(s);
  std::u32string set;
  if (chars != nullptr && chars->is_string()) set = ToU32(chars->str());
  auto strip_it = [&](char32_t c) {
    return (chars != nullptr && chars->is_string()) ? set.find(c) != std::u32string::npos
                                                    : IsPySpace(c);
  };
  size_t b = 0;
  size_t e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return FromU32(std::u32string_view(u).substr(b, e - b));
}

std::string Reversed(std::string_view s) { return std::string(s.rbegin(), s.rend()); }

// haystack.rfind(needle) in linear time: a forward search of the reversed strings.
size_t RFindBytes(std::string_view haystack, std::string_view needle) {
  if (needle.size() > haystack.size()) return std::string::npos;
  const size_t at = FindBytes(Reversed(haystack), Reversed(needle), 0);
  return at == std::string::npos ? at : haystack.size() - at - needle.size();
}

// Python str.split(sep, maxsplit) with a non-empty separator; every part is charged to the
// budget as it is made, so "a" * 10**7 split on "a" stops at the budget, not at 10**7 parts.
Status SplitOn(const std::string& s, const std::string& d, int64_t maxsplit,
               std::vector<std::string>* out) {
  size_t pos = 0;
  while (true) {
    VLS_RETURN_IF_ERROR(CheckItems(1, "split()"));
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(out->size()) >= maxsplit)
                          ? std::string::npos
                          : FindBytes(s, d, pos);
    if (at == std::string::npos) {
      out->push_back(s.substr(pos));
      return Status::Ok();
    }
    out->push_back(s.substr(pos, at - pos));
    pos = at + d.size();
  }
}

StatusOr<Value> Split(const std::string& s, const CallArgs& a, bool from_right) {
  const Value* sep = a.positional.empty() ? nullptr : &a.positional[0];
  int64_t maxsplit = a.positional.size() > 1 ? a.positional[1].as_int() : -1;
  for (const auto& kw : a.keyword) {
    if (kw.first == "sep") sep = &kw.second;
    if (kw.first == "maxsplit") maxsplit = kw.second.as_int();
  }
  ValueList parts;
  if (sep == nullptr || sep->is_none()) {
    std::u32string u = ToU32(s);
    std::vector<std::u32string> words;
    size_t i = 0;
    if (from_right) {
      // rsplit(None): split from the right; then reverse.
      size_t e = u.size();
      while (true) {
        while (e > 0 && IsPySpace(u[e - 1])) --e;
        if (e == 0) break;
        size_t b = e;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          words.push_back(u.substr(0, e));
          break;
        }
        while (b > 0 && !IsPySpace(u[b - 1])) --b;
        VLS_RETURN_IF_ERROR(CheckItems(1, "rsplit()"));
        words.push_back(u.substr(b, e - b));
        e = b;
      }
      std::reverse(words.begin(), words.end());
    } else {
      while (true) {
        while (i < u.size() && IsPySpace(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t e = u.size();
          while (e > i && IsPySpace(u[e - 1])) --e;
          words.push_back(u.substr(i, e - i));
          break;
        }
        size_t b = i;
        while (i < u.size() && !IsPySpace(u[i])) ++i;
        VLS_RETURN_IF_ERROR(CheckItems(1, "split()"));
        words.push_back(u.substr(b, i - b));
      }
    }
    for (auto& w : words) parts.push_back(Value::String(FromU32(w)));
    return Value::List(std::move(parts));
  }
  if (!sep->is_string()) return InvalidArgument("split(): separator must be str or None");
  const std::string& d = sep->str();
  if (d.empty()) return InvalidArgument("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    VLS_RETURN_IF_ERROR(SplitOn(s, d, maxsplit, &out));
  } else {
    // Splitting from the right is splitting the reversed string from the left.
    VLS_RETURN_IF_ERROR(SplitOn(Reversed(s), Reversed(d), maxsplit, &out));
    for (std::string& part : out) part = Reversed(part);
    std::reverse(out.begin(), out.end());
  }
  for (auto& p : out) parts.push_back(Value::String(std::move(p)));
  return Value::List(std::move(parts));
}

StatusOr<bool> StartsEnds(const std::string& s, const Value& arg, bool starts) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return starts ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_string()) return one(arg.str());
  if (arg.is_list()) {
    for (const Value& v : arg.list()) {
      if (!v.is_string()) return InvalidArgument("startswith/endswith: tuple items must be str");
      if (one(v.str())) return true;
    }
    return false;
  }
  return InvalidArgument(std::string(starts ? "startswith" : "endswith") +
                         " first arg must be str or a tuple of str, not " + arg.TypeName());
}

// Python str.replace; the result's size is checked before it is built.
StatusOr<std::string> Replace(const std::string& s, const std::string& from, const std::string& to,
                              int64_t count) {
  uint64_t matches = 0;
  if (from.empty()) {
    matches = ToU32(s).size() + 1;
  } else {
    for (size_t p = FindBytes(s, from, 0); p != std::string::npos;
         p = FindBytes(s, from, p + from.size())) {
      ++matches;
    }
  }
  if (count >= 0) matches = std::min(matches, static_cast<uint64_t>(count));
  const uint64_t removed = from.size() * matches;
  const uint64_t added =
      to.size() > UINT64_MAX / std::max<uint64_t>(1, matches) ? UINT64_MAX : to.size() * matches;
  VLS_RETURN_IF_ERROR(CheckString(
      added > UINT64_MAX - s.size() ? UINT64_MAX : s.size() - removed + added, "replace()"));
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    std::u32string u = ToU32(s);
    std::string out;
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < u.size()) tok::AppendUtf8(u[i], &out);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = FindBytes(s, from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

const Value* Arg(const CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  for (const auto& kw : a.keyword) {
    if (kw.first == name) return &kw.second;
  }
  return nullptr;
}

// `obj` (a string) is held by the bound method; copying it is O(1) (the text is shared).
Value StringMethod(const Value& obj, const std::string& name) {
  auto fn = [obj, name](CallArgs& a) -> StatusOr<Value> {
    const std::string& s = obj.str();
    SpendBytes(s.size());  // every method scans the string at least once
    const Value* a0 = Arg(a, 0, "");
    if (name == "startswith" || name == "endswith") {
      if (a0 == nullptr) return InvalidArgument(name + "() takes at least 1 argument");
      VLS_ASSIGN_OR_RETURN(bool r, StartsEnds(s, *a0, name == "startswith"));
      return Value::Bool(r);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = a0 != nullptr && !a0->is_none() ? a0 : nullptr;
      return Value::String(Strip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split") return Split(s, a, false);
    if (name == "rsplit") return Split(s, a, true);
    if (name == "upper") return Value::String(CaseMap(s, true));
    if (name == "lower") return Value::String(CaseMap(s, false));
    if (name == "replace") {
      const Value* b = Arg(a, 1, "");
      const Value* c = Arg(a, 2, "count");
      if (a0 == nullptr || b == nullptr || !a0->is_string() || !b->is_string()) {
        return InvalidArgument("replace() takes two strings");
      }
      VLS_ASSIGN_OR_RETURN(std::string r,
                           Replace(s, a0->str(), b->str(), c != nullptr ? c->as_int() : -1));
      return Value::String(std::move(r));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      if (a0 == nullptr || !a0->is_string()) return InvalidArgument(name + "() takes a string");
      if (name == "count") {
        if (a0->str().empty()) return Value::Int(static_cast<int64_t>(ToU32(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = FindBytes(s, a0->str(), 0); p != std::string::npos;
             p = FindBytes(s, a0->str(), p + a0->str().size()))
          ++n;
        return Value::Int(n);
      }
      const size_t at = name == "rfind" ? RFindBytes(s, a0->str()) : FindBytes(s, a0->str(), 0);
      if (at == std::string::npos) {
        if (name == "index") return InvalidArgument("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(ToU32(s.substr(0, at)).size()));
    }
    if (name == "join") {
      if (a0 == nullptr) return InvalidArgument("join() takes an iterable");
      VLS_ASSIGN_OR_RETURN(ValueList items, Iterate(*a0));
      uint64_t total = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          return InvalidArgument("sequence item " + std::to_string(i) + ": expected str instance");
        total += items[i].str().size() + (i > 0 ? s.size() : 0);
      }
      VLS_RETURN_IF_ERROR(CheckString(total, "join()"));
      std::string out;
      out.reserve(total);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += s;
        out += items[i].str();
      }
      return Value::String(std::move(out));
    }
    if (name == "title" || name == "capitalize") {
      std::u32string u = ToU32(s);
      bool prev_cased = false;
      for (size_t i = 0; i < u.size(); ++i) {
        const char32_t c = u[i];
        const bool cased = u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED) != 0;
        const bool first = name == "title" ? !prev_cased : i == 0;
        u[i] = static_cast<char32_t>(first ? u_totitle(static_cast<UChar32>(c))
                                           : u_tolower(static_cast<UChar32>(c)));
        prev_cased = cased;
      }
      return Value::String(FromU32(u));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" ||
        name == "isupper" || name == "islower") {
      std::u32string u = ToU32(s);
      if (u.empty()) return Value::Bool(false);
      bool ok = true;
      bool any_cased = false;
      for (char32_t c : u) {
        const auto uc = static_cast<UChar32>(c);
        if (name == "isdigit") ok = ok && u_isdigit(uc);
        if (name == "isalpha") ok = ok && u_isalpha(uc);
        if (name == "isalnum") ok = ok && (u_isalpha(uc) || u_isdigit(uc));
        if (name == "isspace") ok = ok && IsPySpace(c);
        if (name == "isupper") {
          ok = ok && !u_islower(uc);
          any_cased = any_cased || u_isupper(uc);
        }
        if (name == "islower") {
          ok = ok && !u_isupper(uc);
          any_cased = any_cased || u_islower(uc);
        }
      }
      if (name == "isupper" || name == "islower") ok = ok && any_cased;
      return Value::Bool(ok);
    }
    return Unimplemented("unsupported template feature: str." + name + "()");
  };
  return Value::Function("str." + name, fn);
}

}  // namespace

StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      VLS_RETURN_IF_ERROR(CheckItems(v.list().size(), "iterating a list"));
      return v.list();
    case Value::Kind::kDict: {
      VLS_RETURN_IF_ERROR(CheckItems(v.dict().size(), "iterating a dict"));
      ValueList keys;
      for (const auto& kv : v.dict()) keys.push_back(Value::String(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      VLS_RETURN_IF_ERROR(CheckItems(v.str().size(), "iterating a string"));
      ValueList chars;
      std::u32string u = ToU32(v.str());
      for (char32_t c : u) chars.push_back(Value::String(FromU32(std::u32string(1, c))));
      return chars;
    }
    case Value::Kind::kUndefined: return ValueList{};
    default: return InvalidArgument("'" + v.TypeName() + "' object is not iterable");
  }
}

StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList: return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict().size());
    case Value::Kind::kString:
      SpendBytes(v.str().size());
      return static_cast<int64_t>(ToU32(v.str()).size());
    case Value::Kind::kUndefined: return 0;
    default: return InvalidArgument("object of type '" + v.TypeName() + "' has no len()");
  }
}

Value GetAttribute(const Value& obj, const std::string& name) {
  if (obj.is_dict()) SpendSteps(static_cast<int64_t>(obj.dict().size()));  // a linear lookup
  const std::string missing = "'" + obj.TypeName() + " object' has no attribute '" + name + "'";
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      if (name == "items" || name == "keys" || name == "values") {
        return Value::Function(
            "dict." + name,
            [d = obj, name](CallArgs&) -> StatusOr<Value> {
              VLS_RETURN_IF_ERROR(
                  CheckItems(d.dict().size() * (name == "items" ? 3 : 1), "dict." + name + "()"));
              ValueList out;
              for (const auto& kv : d.dict()) {
                if (name == "keys") {
                  out.push_back(Value::String(kv.first));
                } else if (name == "values") {
                  out.push_back(kv.second);
                } else {
                  out.push_back(Value::List({Value::String(kv.first), kv.second}));
                }
              }
              return Value::List(std::move(out));
            },
            &obj);
      }
      if (name == "get") {
        return Value::Function(
            "dict.get",
            [d = obj](CallArgs& a) -> StatusOr<Value> {
              if (a.positional.empty()) return InvalidArgument("get expected at least 1 argument");
              SpendSteps(static_cast<int64_t>(d.dict().size()));
              const Value* v =
                  a.positional[0].is_string() ? d.Find(a.positional[0].str()) : nullptr;
              if (v != nullptr) return *v;
              return a.positional.size() > 1 ? a.positional[1] : Value::None();
            },
            &obj);
      }
      if (name == "pop" || name == "popitem" || name == "update" || name == "clear" ||
          name == "setdefault") {
        return Value::Undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
      }
      const Value* v = obj.Find(name);
      return v != nullptr ? *v : Value::Undefined(missing);
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.Find(name);
      return v != nullptr ? *v : Value::Undefined(missing);
    }
    case Value::Kind::kString: {
      static const char* const kMethods[] = {
          "startswith", "endswith", "strip",   "lstrip",  "rstrip",  "split",   "rsplit", "upper",
          "lower",      "replace",  "find",    "rfind",   "index",   "count",   "join",   "title",
          "capitalize", "isdigit",  "isalpha", "isspace", "isalnum", "isupper", "islower"};
      for (const char* m : kMethods) {
        if (name == m) return StringMethod(obj, name);
      }
      return Value::Undefined(missing);
    }
    default: return Value::Undefined(missing);
  }
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_list() && key.is_number() && key.kind() != Value::Kind::kFloat) {
    int64_t i = key.as_int();
    const auto n = static_cast<int64_t>(obj.list().size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("list index out of range");
    return obj.list()[i];
  }
  if (obj.is_string() && key.is_number() && key.kind() != Value::Kind::kFloat) {
    // Walks |index| code points from the start or the end: no copy of the string.
    const std::string& str = obj.str();
    const int64_t i = key.as_int();
    size_t pos = 0;
    if (i >= 0) {
      for (int64_t k = 0; k < i && pos < str.size(); ++k) tok::NextCodePoint(str, &pos);
    } else {
      // -1 is the last code point: step back over -i code point starts.
      const uint64_t back = static_cast<uint64_t>(-(i + 1)) + 1;
      uint64_t k = 0;
      pos = str.size();
      while (k < back && pos > 0) {
        --pos;
        while (pos > 0 && (static_cast<unsigned char>(str[pos]) & 0xC0) == 0x80) --pos;
        ++k;
      }
      if (k < back) pos = str.size();  // fewer code points than that: out of range
    }
    if (!SpendBytes(i >= 0 ? pos : str.size() - pos)) return Value::Undefined("out of budget");
    if (pos >= str.size()) return Value::Undefined("string index out of range");
    size_t end = pos;
    tok::NextCodePoint(str, &end);
    return Value::String(str.substr(pos, end - pos));
  }
  if (obj.is_dict() && key.is_string()) {
    SpendSteps(static_cast<int64_t>(obj.dict().size()));
    const Value* v = obj.Find(key.str());
    if (v != nullptr) return *v;
  }
  if (key.is_string()) return GetAttribute(obj, key.str());
  return Value::Undefined("'" + obj.TypeName() + " object' has no item " + key.Repr());
}

}  // namespace vls::jinja
