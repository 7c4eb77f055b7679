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
  static Value Function(std::string name, NativeFn fn);
  // From JSON (objects keep their key order).
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_; }  // string text, or the undefined hint
  const ValueList& list() const { return *list_; }
  const ValueDict& dict() const { return *dict_; }
  ValueDict& mutable_namespace() const { return *dict_; }
  const NativeFn& fn() const { return *fn_; }

  // Python truthiness.
  bool Truthy() const;
  // Python str() as Jinja prints it ("" for undefined).
  std::string ToString() const;
  // Python repr().
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
  std::string s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const NativeFn> fn_;
};

// Python ==.
bool Equal(const Value& a, const Value& b);
// Python <; error for unorderable types.
StatusOr<bool> Less(const Value& a, const Value& b);
// Python repr() of a float ("1.0", "1e+20", "inf").
std::string FloatRepr(double f);
// Python's str.isspace() for one code point.
bool IsPySpace(char32_t c);

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_VALUE_H_
