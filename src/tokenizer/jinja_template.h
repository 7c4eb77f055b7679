// A Jinja template engine for chat templates: the subset of Jinja2 that Hugging Face chat
// templates use, rendering byte-identically to Python Jinja2 as transformers configures it
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson with
// ensure_ascii=False, raise_exception). Anything outside the subset is an error naming it.
#ifndef VLSTACK_TOKENIZER_JINJA_TEMPLATE_H_
#define VLSTACK_TOKENIZER_JINJA_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace vls::jinja {

// Thread safety: immutable after Parse; Render may run on several threads at once.
class Template {
 public:
  static StatusOr<Template> Parse(std::string_view source);
  // `globals` are the template variables (messages, tools, add_generation_prompt, ...);
  // range, namespace, dict, raise_exception and strftime_now are provided.
  StatusOr<std::string> Render(const ValueDict& globals) const;

 private:
  std::shared_ptr<const Node> root_;
};

// Filters, tests and methods (jinja_builtins.cc).
StatusOr<Value> ApplyFilter(const std::string& name, const Value& operand, CallArgs& args);
StatusOr<bool> ApplyTest(const std::string& name, const Value& operand, CallArgs& args);
// Attribute of a value as Jinja's sandboxed getattr sees it (methods are bound functions).
Value GetAttribute(const Value& obj, const std::string& name);
// obj[key] as Jinja's getitem does it.
Value GetItem(const Value& obj, const Value& key);
// Items a for loop visits (dict keys, string characters); error if not iterable.
StatusOr<ValueList> Iterate(const Value& v);
// Python len().
StatusOr<int64_t> Length(const Value& v);

}  // namespace vls::jinja

#endif  // VLSTACK_TOKENIZER_JINJA_TEMPLATE_H_
