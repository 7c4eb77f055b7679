// The rules of the JSON Schema front end for each type (json_schema_internal.h): objects, arrays,
// strings (length, pattern, format), numbers and integers (bounds), enum and const.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/json_schema_internal.h"
#include "grammar/json_schema_regex.h"
#include "io/untrusted_json.h"

namespace vls::grammar::json_schema_internal {
namespace {

// Bounds beyond this are refused (or dropped where they bound nothing a reply can write).
constexpr double kMaxBound = 1e18;

// A count keyword (minItems, maxLength, ...) as an int within [0, max_repeat]; -1 when absent.
Status ReadCount(const Json& s, const char* key, const std::string& path,
                 const GrammarLimits& limits, int* out) {
  *out = -1;
  if (!s.contains(key)) return Status::Ok();
  const Json& v = s[key];
  const bool integral = v.is_number_integer() ||
                        (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (!integral || v.get<double>() < 0) {
    return InvalidArgument("invalid \"" + std::string(key) + "\" " + At(path) +
                           ": expected a non-negative integer");
  }
  if (v.get<double>() > limits.max_repeat) {
    return ResourceExhausted("\"" + std::string(key) + "\" " + At(path) + " is over the limit of " +
                             std::to_string(limits.max_repeat));
  }
  *out = static_cast<int>(v.get<double>());
  return Status::Ok();
}

// The JSON Schema types `v` has ("integer" values are also "number").
bool HasType(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  return false;
}

}  // namespace

StatusOr<int32_t> SchemaCompiler::ObjectRule(const Json& s, const std::string& path, int depth) {
  struct Prop {
    std::string name;
    int32_t value;
    bool required;
  };
  std::vector<std::string> required;
  if (s.contains("required")) {
    const Json& r = s["required"];
    if (!r.is_array()) {
      return InvalidArgument("invalid \"required\" " + At(path) + ": expected an array");
    }
    for (const Json& x : r) {
      if (!x.is_string()) {
        return InvalidArgument("invalid \"required\" " + At(path) + ": expected strings");
      }
      required.push_back(x.get<std::string>());
    }
  }
  auto is_required = [&](const std::string& n) {
    return std::find(required.begin(), required.end(), n) != required.end();
  };
  std::vector<Prop> props;
  std::vector<std::string> names;
  if (s.contains("properties")) {
    const Json& p = s["properties"];
    if (!p.is_object()) {
      return InvalidArgument("invalid \"properties\" " + At(path) + ": expected an object");
    }
    for (const auto& [name, sub] : p.items()) {
      names.push_back(name);
      VLS_ASSIGN_OR_RETURN(
          const int32_t v,
          Visit(sub, PointerChild(PointerChild(path, "properties"), name), depth + 1));
      if (v == kNone) {
        if (is_required(name)) return kNone;
        continue;
      }
      props.push_back({name, v, is_required(name)});
    }
  }
  // Required names without a property schema: any value.
  for (const std::string& r : required) {
    if (std::find(names.begin(), names.end(), r) == names.end()) {
      names.push_back(r);
      props.push_back({r, AnyValue(), true});
    }
  }
  int32_t extra = options_.strict ? kNone : AnyValue();
  if (s.contains("additionalProperties")) {
    VLS_ASSIGN_OR_RETURN(extra, Visit(s["additionalProperties"],
                                      PointerChild(path, "additionalProperties"), depth + 1));
  }
  const int32_t ws = Ws();
  Sequence sep = {Ref(ws), b_->Char(','), Ref(ws)};
  std::optional<Sequence> extra_kv;
  if (extra != kNone) {
    extra_kv = Sequence{Ref(KeyNotIn(names)), Ref(ws), b_->Char(':'), Ref(ws), Ref(extra)};
  }
  // rest[i]: members i.. after one has been written; first[i]: before any, at least one member
  // (kNone: impossible).
  const size_t n = props.size();
  std::vector<int32_t> rest(n + 1, kNone);
  std::vector<int32_t> first(n + 1, kNone);
  if (extra_kv) {
    Sequence x = sep;
    x.insert(x.end(), extra_kv->begin(), extra_kv->end());
    const int32_t one = NewRule("extra-member", {x});
    rest[n] = b_->Repeat(prefix_ + "-extra", {Ref(one)}, 0, -1);
    Sequence f = *extra_kv;
    f.push_back(Ref(rest[n]));
    first[n] = NewRule("extras", {f});
  } else {
    rest[n] = NewRule("end", {{}});
  }
  for (size_t i = n; i-- > 0;) {
    Sequence kv = Lit(DumpJsonSafe(Json(props[i].name)));
    kv.insert(kv.end(), {Ref(ws), b_->Char(':'), Ref(ws), Ref(props[i].value)});
    Sequence with_sep = sep;
    with_sep.insert(with_sep.end(), kv.begin(), kv.end());
    with_sep.push_back(Ref(rest[i + 1]));
    Sequence lead = kv;
    lead.push_back(Ref(rest[i + 1]));
    std::vector<Sequence> r = {with_sep};
    std::vector<Sequence> f = {lead};
    if (!props[i].required) {
      r.push_back({Ref(rest[i + 1])});
      if (first[i + 1] != kNone) f.push_back({Ref(first[i + 1])});
    }
    rest[i] = NewRule("p-" + props[i].name, std::move(r));
    first[i] = NewRule("first-" + props[i].name, std::move(f));
  }
  const bool can_be_empty =
      std::none_of(props.begin(), props.end(), [](const Prop& p) { return p.required; });
  std::vector<Sequence> alts;
  if (can_be_empty) alts.push_back({b_->Char('{'), Ref(ws), b_->Char('}')});
  if (first[0] != kNone) {
    alts.push_back({b_->Char('{'), Ref(ws), Ref(first[0]), Ref(ws), b_->Char('}')});
  }
  return NewRule("object", std::move(alts));
}

StatusOr<int32_t> SchemaCompiler::ArrayRule(const Json& s, const std::string& path, int depth) {
  int lo = 0;
  int hi = -1;
  VLS_RETURN_IF_ERROR(ReadCount(s, "minItems", path, limits_, &lo));
  VLS_RETURN_IF_ERROR(ReadCount(s, "maxItems", path, limits_, &hi));
  lo = std::max(lo, 0);
  // The positional schemas and the one for the rest.
  const Json* prefix = nullptr;
  std::string prefix_key;
  const Json* rest_schema = nullptr;
  std::string rest_key;
  if (s.contains("prefixItems")) {
    prefix = &s["prefixItems"];
    prefix_key = "prefixItems";
    if (s.contains("items")) {
      rest_schema = &s["items"];
      rest_key = "items";
    }
  } else if (s.contains("items") && s["items"].is_array()) {
    prefix = &s["items"];
    prefix_key = "items";
    if (s.contains("additionalItems")) {
      rest_schema = &s["additionalItems"];
      rest_key = "additionalItems";
    }
  } else if (s.contains("items")) {
    rest_schema = &s["items"];
    rest_key = "items";
  }
  if (prefix != nullptr && !prefix->is_array()) {
    return InvalidArgument("invalid \"" + prefix_key + "\" " + At(path) + ": expected an array");
  }
  std::vector<int32_t> positional;
  if (prefix != nullptr) {
    for (size_t i = 0; i < prefix->size(); ++i) {
      VLS_ASSIGN_OR_RETURN(
          const int32_t r,
          Visit((*prefix)[i], PointerChild(PointerChild(path, prefix_key), std::to_string(i)),
                depth + 1));
      if (r == kNone) {
        // No value fits position i: the array is shorter.
        hi = hi < 0 ? static_cast<int>(i) : std::min(hi, static_cast<int>(i));
        break;
      }
      positional.push_back(r);
    }
  }
  int32_t item = AnyValue();
  if (rest_schema != nullptr) {
    VLS_ASSIGN_OR_RETURN(item, Visit(*rest_schema, PointerChild(path, rest_key), depth + 1));
  }
  const int j = static_cast<int>(positional.size());
  if (item == kNone) hi = hi < 0 ? j : std::min(hi, j);
  if (hi >= 0 && hi < lo) return kNone;
  auto elem = [&](int i) { return i < j ? positional[static_cast<size_t>(i)] : item; };
  const int32_t ws = Ws();
  // tail[i]: the elements from position i on, each after a separator (i >= 1).
  int32_t tail = kNone;
  {
    const int start = std::max(j, 1);
    const int min = std::max(lo - start, 0);
    const int max = hi < 0 ? -1 : std::max(hi - start, 0);
    if (item == kNone || max == 0) {
      tail = NewRule("items-end", {{}});
    } else {
      const int32_t one = NewRule("next-item", {{Ref(ws), b_->Char(','), Ref(ws), Ref(item)}});
      tail = b_->Repeat(prefix_ + "-items", {Ref(one)}, min, max);
    }
  }
  for (int i = j - 1; i >= 1; --i) {
    std::vector<Sequence> alts;
    if (hi < 0 || i < hi) {
      alts.push_back({Ref(ws), b_->Char(','), Ref(ws), Ref(elem(i)), Ref(tail)});
    }
    if (i >= lo) alts.push_back({});
    tail = NewRule("prefix-items", std::move(alts));
  }
  std::vector<Sequence> alts;
  if (lo == 0) alts.push_back({b_->Char('['), Ref(ws), b_->Char(']')});
  if ((hi < 0 || hi >= 1) && elem(0) != kNone) {
    alts.push_back({b_->Char('['), Ref(ws), Ref(elem(0)), Ref(tail), Ref(ws), b_->Char(']')});
  }
  if (alts.empty()) return kNone;
  return NewRule("array", std::move(alts));
}

StatusOr<int32_t> SchemaCompiler::FormatRule(const std::string& format, const std::string& path) {
  auto it = formats_.find(format);
  if (it != formats_.end()) return it->second;
  static const std::string kDay31 = "(0[1-9]|[12][0-9]|3[01])";
  static const std::string kLeap =
      "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[048]|[2468][048]|[13579][26])00)";
  static const std::string kDate =
      "([0-9]{4}-((0[13578]|1[02])-" + kDay31 +
      "|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|" + kLeap + "-02-29)";
  static const std::string kFrac = "(\\.[0-9]{1,9})?";
  static const std::string kTime = "(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" + kFrac +
                                   "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])|23:59:60" + kFrac +
                                   "([Zz]|[+-]00:00))";
  static const std::string kAtom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,64}";
  static const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  static const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  std::string re;
  if (format == "date") {
    re = kDate;
  } else if (format == "time") {
    re = kTime;
  } else if (format == "date-time") {
    re = kDate + "[Tt]" + kTime;
  } else if (format == "uuid") {
    re = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  } else if (format == "email") {
    re = kAtom + "(\\." + kAtom + ")*@" + kLabel + "(\\." + kLabel + ")+";
  } else if (format == "ipv4") {
    re = kOctet + "(\\." + kOctet + "){3}";
  } else {
    return InvalidArgument("unsupported format \"" + format + "\" " + At(path) +
                           " (keyword \"format\"; supported: date, time, date-time, uuid, "
                           "email, ipv4)");
  }
  RegexMode mode;
  mode.json_string = true;
  VLS_ASSIGN_OR_RETURN(const int32_t body,
                       AddRegexRuleWithMode(b_, re, prefix_ + "-" + format, limits_, mode));
  const int32_t rule = NewRule(format, {{b_->Char('"'), Ref(body), b_->Char('"')}});
  formats_[format] = rule;
  return rule;
}

StatusOr<int32_t> SchemaCompiler::StringRule(const Json& s, const std::string& path) {
  int min = -1;
  int max = -1;
  VLS_RETURN_IF_ERROR(ReadCount(s, "minLength", path, limits_, &min));
  VLS_RETURN_IF_ERROR(ReadCount(s, "maxLength", path, limits_, &max));
  const bool lengths = min >= 0 || max >= 0;
  if (s.contains("pattern") || s.contains("format")) {
    const char* key = s.contains("pattern") ? "pattern" : "format";
    const char* other = lengths
                            ? (min >= 0 ? "minLength" : "maxLength")
                            : (s.contains("pattern") && s.contains("format") ? "format" : nullptr);
    if (other != nullptr) {
      return InvalidArgument("keyword \"" + std::string(other) + "\" beside \"" + key +
                             "\" is not supported " + At(path));
    }
    if (!s[key].is_string()) {
      return InvalidArgument("invalid \"" + std::string(key) + "\" " + At(path) +
                             ": expected a string");
    }
    if (std::string(key) == "format") return FormatRule(s[key].get<std::string>(), path);
    RegexMode mode;
    mode.json_string = true;
    mode.search = true;
    StatusOr<int32_t> body = AddRegexRuleWithMode(b_, s["pattern"].get<std::string>(),
                                                  prefix_ + "-pattern", limits_, mode);
    if (!body.ok()) {
      return Status(body.status().code(),
                    "invalid \"pattern\" " + At(path) + ": " + body.status().message());
    }
    return NewRule("pattern", {{b_->Char('"'), Ref(*body), b_->Char('"')}});
  }
  if (!lengths) return AnyString();
  if (max >= 0 && max < std::max(min, 0)) return kNone;
  const int32_t chars = b_->Repeat(prefix_ + "-chars", {Ref(StringChar())}, std::max(min, 0), max);
  return NewRule("string", {{b_->Char('"'), Ref(chars), b_->Char('"')}});
}

StatusOr<int32_t> SchemaCompiler::NumberRule(const Json& s, const std::string& path, bool integer) {
  struct Bound {
    double value;
    bool exclusive;
    const char* key;
  };
  std::optional<Bound> lo;
  std::optional<Bound> hi;
  bool bounded = false;
  auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
    if (!s.contains(key)) return Status::Ok();
    const Json& v = s[key];
    if (v.is_boolean()) return Status::Ok();  // draft 4 form, read with minimum/maximum
    if (!v.is_number()) {
      return InvalidArgument("invalid \"" + std::string(key) + "\" " + At(path) +
                             ": expected a number");
    }
    const double x = v.get<double>();
    bounded = true;
    if (std::fabs(x) > kMaxBound) {
      // Numbers with a bound are written without exponent and with at most kMaxIntDigits
      // integer digits (below 1e20): a bound past that on the open side bounds nothing.
      if (std::fabs(x) >= 1e20 && ((lower && x < 0) || (!lower && x > 0))) return Status::Ok();
      return InvalidArgument("unsupported \"" + std::string(key) + "\" " + At(path) +
                             ": bounds beyond 1e18 are not supported");
    }
    const char* draft4 = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const Bound b{x, exclusive || (s.contains(draft4) && s[draft4] == Json(true)), key};
    std::optional<Bound>& slot = lower ? lo : hi;
    if (!slot || (lower ? x > slot->value : x < slot->value) || (x == slot->value && b.exclusive)) {
      slot = b;
    }
    return Status::Ok();
  };
  VLS_RETURN_IF_ERROR(bound("minimum", true, false));
  VLS_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
  VLS_RETURN_IF_ERROR(bound("maximum", false, false));
  VLS_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
  if (!bounded) return integer ? AnyInteger() : AnyNumber();
  // The bounds rounded inward to integers (exact for integers).
  std::optional<int64_t> ilo;
  std::optional<int64_t> ihi;
  bool ilo_excl = false;
  bool ihi_excl = false;
  if (lo) {
    const double r = std::ceil(lo->value);
    ilo = static_cast<int64_t>(r);
    ilo_excl = lo->exclusive && r == lo->value;
  }
  if (hi) {
    const double r = std::floor(hi->value);
    ihi = static_cast<int64_t>(r);
    ihi_excl = hi->exclusive && r == hi->value;
  }
  if (integer) {
    if (ilo && ilo_excl) *ilo += 1;
    if (ihi && ihi_excl) *ihi -= 1;
    return IntegerRange(ilo, ihi);
  }
  std::vector<Sequence> alts;
  const int32_t base = NumberRange(ilo, ilo_excl, ihi, ihi_excl);
  if (base != kNone) alts.push_back({Ref(base)});
  // A non-integer bound adds the numbers of its own integer unit on the right side of it:
  // the integer part written out, then a fraction compared digit by digit.
  for (const std::optional<Bound>* which : {&lo, &hi}) {
    if (!*which || std::floor((*which)->value) == (*which)->value) continue;
    const Bound& b = **which;
    const bool lower = which == &lo;
    char buf[400];
    const auto res =
        std::to_chars(buf, buf + sizeof(buf), std::fabs(b.value), std::chars_format::fixed);
    const std::string text(buf, res.ptr);
    const size_t dot = text.find('.');
    const std::string whole = text.substr(0, dot);
    std::string frac = dot == std::string::npos ? "" : text.substr(dot + 1);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    if (frac.empty() || frac.size() > static_cast<size_t>(kMaxFracDigits)) {
      return InvalidArgument("unsupported \"" + std::string(b.key) + "\" " + At(path) +
                             ": more than " + std::to_string(kMaxFracDigits) + " fraction digits");
    }
    const bool negative = b.value < 0;
    // The unit (u, u + 1) the extra numbers lie in; the other bound must not cut into it.
    const double unit_lo = negative ? -std::floor(std::fabs(b.value)) - 1 : std::floor(b.value);
    const double unit_hi = unit_lo + 1;
    const std::optional<Bound>& other = lower ? hi : lo;
    if (other && (lower ? other->value < unit_hi : other->value > unit_lo)) {
      return InvalidArgument("unsupported \"" + std::string(b.key) + "\" " + At(path) +
                             ": both bounds of a number within one integer unit");
    }
    // x >= b with b > 0, or x <= b with b < 0: the fraction is at least b's; otherwise at most.
    const bool greater = lower != negative;
    Sequence alt;
    if (negative) alt.push_back(b_->Char('-'));
    Sequence digits = Lit(whole);
    alt.insert(alt.end(), digits.begin(), digits.end());
    alt.push_back(b_->Char('.'));
    alt.push_back(Ref(FracCompare(frac, greater, b.exclusive)));
    alts.push_back(std::move(alt));
  }
  if (alts.empty()) return kNone;
  return NewRule("number-bounds", std::move(alts));
}

StatusOr<int32_t> SchemaCompiler::EnumRule(const Json& s, const std::string& path) {
  for (const auto& [k, v] : s.items()) {
    if (k == "enum" || k == "const" || k == "type" || k == "$defs" || k == "definitions" ||
        IsAnnotationKeyword(k)) {
      continue;
    }
    return InvalidArgument("keyword \"" + k + "\" beside \"" +
                           (s.contains("enum") ? "enum" : "const") + "\" is not supported " +
                           At(path));
  }
  Json values = Json::array();
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) {
      return InvalidArgument("invalid \"enum\" " + At(path) + ": expected an array");
    }
    if (s["enum"].size() > limits_.max_enum) {
      return ResourceExhausted("\"enum\" " + At(path) + " has " + std::to_string(s["enum"].size()) +
                               " members, over the limit of " + std::to_string(limits_.max_enum));
    }
    values = s["enum"];
  }
  if (s.contains("const")) {
    if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end()) {
      return kNone;
    }
    values = Json::array({s["const"]});
  }
  std::vector<Sequence> alts;
  for (const Json& v : values) {
    if (s.contains("type")) {
      const Json& t = s["type"];
      bool ok = false;
      if (t.is_string()) ok = HasType(v, t.get<std::string>());
      if (t.is_array()) {
        for (const Json& x : t) ok = ok || (x.is_string() && HasType(v, x.get<std::string>()));
      }
      if (!ok) continue;
    }
    alts.push_back(ValueLiteral(v));
  }
  if (alts.empty()) return kNone;
  return NewRule("enum", std::move(alts));
}

}  // namespace vls::grammar::json_schema_internal
