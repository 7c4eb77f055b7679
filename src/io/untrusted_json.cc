#include "io/untrusted_json.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

namespace vls {
namespace {

// Quotes a key taken from untrusted JSON for an error message: control bytes escaped, long keys
// cut, so a hostile input cannot flood or garble a log.
std::string QuoteKey(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

// First pass over untrusted JSON (SAX, no DOM): syntax errors with their position, the nesting
// bound and keys repeated inside one object. Returning false from a callback stops the parse
// without an exception.
template <typename BasicJson>
class JsonChecker {
 public:
  explicit JsonChecker(int max_depth) : max_depth_(max_depth) {}

  bool null() { return true; }
  bool boolean(bool /*value*/) { return true; }
  bool number_integer(typename BasicJson::number_integer_t /*value*/) { return true; }
  bool number_unsigned(typename BasicJson::number_unsigned_t /*value*/) { return true; }
  bool number_float(typename BasicJson::number_float_t /*value*/,
                    const typename BasicJson::string_t& /*text*/) {
    return true;
  }
  bool string(typename BasicJson::string_t& /*value*/) { return true; }
  bool binary(typename BasicJson::binary_t& /*value*/) { return true; }
  bool start_object(size_t /*elements*/) {
    keys_.emplace_back();
    return Enter();
  }
  bool key(typename BasicJson::string_t& k) {
    if (keys_.back().insert(k).second) return true;
    error_ = "key " + QuoteKey(k) + " appears twice in one object";
    return false;
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(size_t /*elements*/) { return Enter(); }
  bool end_array() {
    --depth_;
    return true;
  }
  bool parse_error(size_t /*position*/, const std::string& /*last_token*/,
                   const typename BasicJson::exception& e) {
    error_ = std::string("invalid JSON: ") + e.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter() {
    if (++depth_ <= max_depth_) return true;
    error_ = "JSON nests deeper than " + std::to_string(max_depth_) + " levels";
    return false;
  }

  int max_depth_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string error_;
};

template <typename BasicJson>
Status Parse(std::string_view label, std::string_view text, BasicJson* out,
             const JsonParseOptions& options) {
  const auto fail = [&](const std::string& what) {
    return Status(options.code, std::string(label) + ": " + what);
  };
  // nlohmann's lexer takes a NUL byte for the end of input, which would let "{}\0garbage" pass;
  // valid JSON never holds a raw NUL.
  const void* nul = text.empty() ? nullptr : std::memchr(text.data(), 0, text.size());
  if (nul != nullptr) {
    return fail("invalid JSON: NUL byte at offset " +
                std::to_string(static_cast<const char*>(nul) - text.data()));
  }
  try {
    JsonChecker<BasicJson> checker(options.max_depth);
    if (!BasicJson::sax_parse(text.begin(), text.end(), &checker, BasicJson::input_format_t::json,
                              /*strict=*/true)) {
      return fail(checker.error().empty() ? "invalid JSON" : checker.error());
    }
    *out = BasicJson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(label) + ": out of memory while parsing JSON");
  } catch (const std::exception& e) {
    return fail(std::string("invalid JSON: ") + e.what());
  }
  if (out->is_discarded()) return fail("invalid JSON");
  return Status::Ok();
}

Status TypeError(std::string_view what, std::string_view expected, const std::string& got) {
  return InvalidArgument(std::string(what) + " must be " + std::string(expected) + ", not " + got);
}

}  // namespace

Status ParseUntrustedJson(std::string_view label, std::string_view text, nlohmann::json* out,
                          const JsonParseOptions& options) {
  return Parse(label, text, out, options);
}

Status ParseUntrustedJson(std::string_view label, std::string_view text,
                          nlohmann::ordered_json* out, const JsonParseOptions& options) {
  return Parse(label, text, out, options);
}

template <typename BasicJson>
std::string JsonTypeName(const BasicJson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return v.template get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return "the integer " + JsonSnippet(v);
  if (v.is_number_float()) return "the number " + JsonSnippet(v);
  if (v.is_string()) return "the string " + JsonSnippet(v);
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "binary data";
}

template <typename BasicJson>
std::string JsonSnippet(const BasicJson& v, size_t max_chars) {
  std::string s;
  try {
    // Containers are shown by their type only: dumping them would recurse through input we do
    // not bound here and could be large.
    if (v.is_array()) return "[...]";
    if (v.is_object()) return "{...}";
    s = v.dump(-1, ' ', false, BasicJson::error_handler_t::replace);
  } catch (const std::exception&) {
    return "(unprintable)";
  }
  if (s.size() > max_chars && max_chars >= 3) {
    size_t cut = max_chars - 3;
    // Do not cut inside a UTF-8 sequence: back up over continuation bytes.
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return s;
}

template <typename BasicJson>
std::string DumpJsonSafe(const BasicJson& v, int indent) {
  return v.dump(indent, ' ', false, BasicJson::error_handler_t::replace);
}

template <typename BasicJson>
Status ReadJsonInt(const BasicJson& v, std::string_view what, int64_t min, int64_t max,
                   int64_t* out) {
  const std::string range =
      "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (max >= 0 && u <= static_cast<uint64_t>(max) && static_cast<int64_t>(u) >= min) {
      *out = static_cast<int64_t>(u);
      return Status::Ok();
    }
    return TypeError(what, range, JsonSnippet(v));
  }
  if (v.is_number_integer()) {
    const int64_t i = v.template get<int64_t>();
    if (i >= min && i <= max) {
      *out = i;
      return Status::Ok();
    }
    return TypeError(what, range, JsonSnippet(v));
  }
  return TypeError(what, range, JsonTypeName(v));
}

template <typename BasicJson>
Status ReadJsonBool(const BasicJson& v, std::string_view what, bool* out) {
  if (!v.is_boolean()) return TypeError(what, "true or false", JsonTypeName(v));
  *out = v.template get<bool>();
  return Status::Ok();
}

template <typename BasicJson>
Status ReadJsonString(const BasicJson& v, std::string_view what, std::string* out) {
  if (!v.is_string()) return TypeError(what, "a string", JsonTypeName(v));
  *out = v.template get_ref<const typename BasicJson::string_t&>();
  return Status::Ok();
}

template <typename BasicJson>
Status ReadJsonNumber(const BasicJson& v, std::string_view what, double min, double max,
                      double* out) {
  const auto range = [&] {
    return "a number in [" + JsonSnippet(BasicJson(min)) + ", " + JsonSnippet(BasicJson(max)) + "]";
  };
  if (!v.is_number()) return TypeError(what, range(), JsonTypeName(v));
  const double d = v.template get<double>();
  if (!std::isfinite(d) || d < min || d > max) return TypeError(what, range(), JsonSnippet(v));
  *out = d;
  return Status::Ok();
}

#define VLS_INSTANTIATE_JSON_READERS(J)                                                   \
  template Status ReadJsonInt<J>(const J&, std::string_view, int64_t, int64_t, int64_t*); \
  template Status ReadJsonBool<J>(const J&, std::string_view, bool*);                     \
  template Status ReadJsonString<J>(const J&, std::string_view, std::string*);            \
  template Status ReadJsonNumber<J>(const J&, std::string_view, double, double, double*); \
  template std::string JsonTypeName<J>(const J&);                                         \
  template std::string JsonSnippet<J>(const J&, size_t);                                  \
  template std::string DumpJsonSafe<J>(const J&, int);

VLS_INSTANTIATE_JSON_READERS(nlohmann::json)
VLS_INSTANTIATE_JSON_READERS(nlohmann::ordered_json)
#undef VLS_INSTANTIATE_JSON_READERS

}  // namespace vls
