// A Jinja template engine for chat templates: the subset of Jinja2 that Hugging Face chat
// templates use, rendering byte-identically to Python Jinja2 as transformers configures it
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson with
// ensure_ascii=False, raise_exception). Anything outside the subset is an error naming it.
//
// Templates (a model folder's tokenizer_config.json) and their inputs (chat requests) come from
// outside, so parsing and rendering are bounded: every limit below is named in the error that
// reports it (kResourceExhausted, with the template line where there is one), nothing recurses
// without a bound, and no exception leaves Parse or Render. The defaults hold every known chat
// template with a wide margin (Qwen3-VL's nests 8 levels and renders a 100-turn conversation in
// under 0.1% of the step budget).
#ifndef VLSTACK_TOKENIZER_JINJA_TEMPLATE_H_
#define VLSTACK_TOKENIZER_JINJA_TEMPLATE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace vls::jinja {

// Parsing. The deepest the syntax may nest: brackets, parentheses, call arguments, chains of
// `not` / unary minus, and block statements ({% if %}, {% for %}, {% macro %}, ...) inside
// each other, counted together. It bounds the parser's recursion.
inline constexpr int kMaxTemplateNesting = 64;
// The deepest the syntax tree may be once operator, filter, attribute and else-if chains are
// counted (`a ~ b ~ c` is two levels); checked after parsing without recursion. Together with
// kMaxRenderDepth it bounds the evaluator's recursion.
inline constexpr int kMaxTemplateTreeDepth = 256;

// Values: kMaxValueDepth and kMaxTemplateInputValues (jinja_value.h).

// Rendering budgets (RenderLimits' defaults).
// Steps: one per expression or statement evaluated, 8 per loop iteration (it builds the `loop`
// variables), one per item a list operation touches (range, +, *, split, sort, comparisons,
// dict lookups, ...) and one per 16 bytes a string operation scans.
inline constexpr int64_t kMaxRenderSteps = 10'000'000;
// The rendered output and every string built on the way (~, +, *, join, indent, tojson,
// replace, printing a list, a {% set %} block, a macro's output).
inline constexpr int64_t kMaxRenderOutputBytes = int64_t{16} << 20;
// Bytes of strings and list items one render may allocate in all (not at once): bounds memory.
inline constexpr int64_t kMaxRenderAllocBytes = int64_t{256} << 20;
// Nested macro calls (recursive macros included).
inline constexpr int kMaxMacroDepth = 64;
// Nested evaluation (expressions and statements, across macro calls). 256 levels take about
// 1 MiB of stack in a release build and 5 MiB in the ASan/UBSan debug build (an expression level
// there is a 17 KB frame).
inline constexpr int kMaxRenderDepth = 256;
// Stack left unused: whatever kMaxRenderDepth allows, evaluation stops with an error when less
// than this is left on the rendering thread's stack (a thread made with a small stack).
inline constexpr size_t kMinRenderStackBytes = size_t{256} << 10;

struct RenderLimits {
  int64_t max_steps = kMaxRenderSteps;
  int64_t max_output_bytes = kMaxRenderOutputBytes;
  int64_t max_alloc_bytes = kMaxRenderAllocBytes;
  int max_macro_depth = kMaxMacroDepth;
  int max_depth = kMaxRenderDepth;
};

// Thread safety: immutable after Parse; Render may run on several threads at once.
class Template {
 public:
  static StatusOr<Template> Parse(std::string_view source);
  // `globals` are the template variables (messages, tools, add_generation_prompt, ...);
  // range, namespace, dict, raise_exception and strftime_now are provided.
  // Errors past a limit are kResourceExhausted and name it.
  StatusOr<std::string> Render(const ValueDict& globals, const RenderLimits& limits = {}) const;

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
