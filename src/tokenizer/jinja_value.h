// Values of the Jinja template engine, with Python semantics (truthiness, str(), repr(),
// equality, ordering) so that rendered output is byte-identical to Python Jinja2.
#ifndef VLSTACK_TOKENIZER_JINJA_VALUE_H_
#define VLSTACK_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace vls::jinja {

// Values. Lists and dicts nest at most this deep, whether they come from JSON inputs (which
// ParseUntrustedJson already holds to kMaxUntrustedJsonDepth = 64) or are built by the template
// (a few levels more: loop items, dict.items() pairs). Bounds the recursion of printing, tojson,
// comparisons and destruction.
inline constexpr int kMaxValueDepth = 128;
// Values (scalars, list items, dict entries) one JSON input (the messages, the tools, ...) may
// hold: a JSON value of a few bytes becomes a template value of about 100.
inline constexpr int64_t kMaxTemplateInputValues = 1'000'000;

class Value;
using ValueList = std::vector<Value>;
// Insertion-ordered string-keyed mapping, as a Python dict built from JSON.
using ValueDict = std::vector<std::pair<std::string, Value>>;

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using NativeFn = std::function<StatusOr<Value>(CallArgs& args)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items);
  static Value Dict(ValueDict items);
  static Value Namespace(ValueDict items);  // mutable, shared by reference
  // `bound` is the value a bound method holds (dict.items), counted in its depth.
  static Value Function(std::string name, NativeFn fn, const Value* bound = nullptr);
  // From JSON (objects keep their key order). Refuses (kResourceExhausted, naming the limit and
  // `what`) JSON nested deeper than max_depth or holding more than kMaxTemplateInputValues
  // values; recursion is bounded by max_depth.
  static StatusOr<Value> FromJson(const nlohmann::ordered_json& j, std::string_view what = "input",
                                  int max_depth = kMaxValueDepth);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  // Levels of lists/dicts (and bound methods) inside: 0 for a scalar, 1 for [1, 2].
  int depth() const { return depth_; }
  // Whether a namespace is reachable from this value (a namespace is).
  bool holds_namespace() const { return holds_namespace_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  // String text, or the undefined hint, or the function name. Shared: copying a Value is O(1)
  // whatever its size.
  const std::string& str() const { return s_ ? *s_ : EmptyString(); }
  const ValueList& list() const { return *list_; }
  const ValueDict& dict() const { return *dict_; }
  ValueDict& mutable_namespace() const { return *dict_; }
  const NativeFn& fn() const { return *fn_; }

  // Python truthiness.
  bool Truthy() const;
  // Python str() as Jinja prints it ("" for undefined). The text of a list or dict stops a byte
  // past the current render's string limit (jinja_budget.h), which fails the caller's check.
  std::string ToString() const;
  // Python repr(), bounded the same way.
  std::string Repr() const;
  // Python type name for messages ("str", "dict", ...).
  std::string TypeName() const;
  // Member of a dict, or nullptr.
  const Value* Find(std::string_view key) const;
  // json.dumps(..., ensure_ascii=False) as transformers' tojson filter does it.
  StatusOr<std::string> ToJson(int indent, bool sort_keys, const std::string& item_sep,
                               const std::string& key_sep) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  int depth_ = 0;
  bool holds_namespace_ = false;
  static const std::string& EmptyString();

  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const NativeFn> fn_;
};

// Python ==. Equal, Less and Repr spend a step per value visited from the current render's
// budget and stop early (with a meaningless answer) once it is spent; the render then fails.
bool Equal(const Value& a, const Value& b);
// Python <; error for unorderable types.
StatusOr<bool> Less(const Value& a, const Value& b);
// Python repr() of a float ("1.0", "1e+20", "inf").
std::string FloatRepr(double f);
// Python's str.isspace() for one code point.
bool IsPySpace(char32_t c);
// haystack.find(needle, pos) in linear time (glibc's two-way memmem; std::string::find is
// O(n*m) on inputs like "aaaa...").
size_t FindBytes(std::string_view haystack, std::string_view needle, size_t pos);

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_VALUE_H_
