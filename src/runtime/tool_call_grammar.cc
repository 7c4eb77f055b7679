#include "runtime/tool_call_grammar.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/json_schema.h"
#include "runtime/structured_output_grammar.h"

namespace vls {
namespace {

using grammar::CharClass;
using grammar::Element;
using grammar::GrammarBuilder;
using grammar::Sequence;
using Json = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";

void Append(Sequence* to, const Sequence& from) { to->insert(to->end(), from.begin(), from.end()); }

// A rule matching every string that does not contain kOpen: the states of the automaton that
// tracks the longest prefix of kOpen the text ends with (kOpen's only '<' is its first
// character, so a '<' always restarts at state 1 and any other mismatch at state 0).
int32_t AddTextWithoutOpenTag(GrammarBuilder* b) {
  const size_t n = kOpen.size();
  std::vector<int32_t> state(n);
  for (size_t k = 0; k < n; ++k) state[k] = b->AddRule("text-" + std::to_string(k));
  for (size_t k = 0; k < n; ++k) {
    std::vector<Sequence> alts;
    alts.emplace_back();  // the text may end in any state
    const auto next = static_cast<uint32_t>(static_cast<unsigned char>(kOpen[k]));
    if (k + 1 < n) alts.push_back({b->Char(next), b->Ref(state[k + 1])});
    CharClass others;
    others.ranges.push_back({next, next});
    if (k != 0) {
      alts.push_back({b->Char('<'), b->Ref(state[1])});
      others.ranges.push_back({'<', '<'});
    }
    alts.push_back({b->Chars(grammar::Complement([&] {
                      grammar::Normalize(&others);
                      return others;
                    }())),
                    b->Ref(state[0])});
    b->SetAlternatives(state[k], std::move(alts));
  }
  return state[0];
}

Status ToolError(size_t i, const Status& s) {
  const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
  return Status(s.code(), field + ": " + s.message()).WithParam(field);
}

// One rule per function: its call block. Names in `order`, rule ids in `calls`.
Status AddCalls(GrammarBuilder* b, const Json& tools, const grammar::GrammarLimits& limits,
                std::vector<std::string>* names, std::vector<int32_t>* calls) {
  if (!tools.is_array()) return InvalidArgument("\"tools\" must be a list").WithParam("tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    auto fn = t.find("function");
    if (!t.is_object() || fn == t.end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string()) {
      const std::string field = "tools[" + std::to_string(i) + "].function";
      return InvalidArgument("\"" + field + "\" must be an object with a \"name\"")
          .WithParam(field);
    }
    const std::string name = (*fn)["name"].get<std::string>();
    grammar::JsonSchemaOptions options;
    if (auto s = fn->find("strict"); s != fn->end() && s->is_boolean()) {
      options.strict = s->get<bool>();
    }
    Json schema = Json{{"type", "object"}};
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) schema = *p;
    StatusOr<int32_t> args = grammar::AddJsonSchemaRule(
        b, schema, "tool-" + std::to_string(i) + "-args", options, limits);
    if (!args.ok()) return ToolError(i, args.status());
    Sequence seq =
        b->Literal(std::string(kOpen) + "\n{\"name\": " + Json(name).dump() + ", \"arguments\": ");
    seq.push_back(b->Ref(*args));
    Append(&seq, b->Literal("}\n</tool_call>"));
    const int32_t rule = b->AddRule("tool-" + std::to_string(i) + "-call");
    b->SetAlternatives(rule, {std::move(seq)});
    names->push_back(name);
    calls->push_back(rule);
  }
  return Status::Ok();
}

}  // namespace

int32_t ImportGrammar(GrammarBuilder* builder, const grammar::Grammar& g) {
  std::vector<int32_t> ids(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) ids[r] = builder->AddRule(g.rules[r].name);
  std::vector<Element> classes;
  classes.reserve(g.classes.size());
  for (const CharClass& c : g.classes) classes.push_back(builder->Chars(c));
  for (size_t r = 0; r < g.rules.size(); ++r) {
    std::vector<Sequence> alts;
    alts.reserve(g.rules[r].alternatives.size());
    for (const Sequence& seq : g.rules[r].alternatives) {
      Sequence out;
      out.reserve(seq.size());
      for (const Element& e : seq) {
        out.push_back(e.kind == Element::Kind::kChars
                          ? classes[static_cast<size_t>(e.index)]
                          : builder->Ref(ids[static_cast<size_t>(e.index)]));
      }
      alts.push_back(std::move(out));
    }
    builder->SetAlternatives(ids[r], std::move(alts));
  }
  return ids[static_cast<size_t>(g.root)];
}

StatusOr<grammar::Grammar> ToolCallGrammar(const Json& tools, const StructuredOutput& so,
                                           const grammar::GrammarLimits& limits) {
  if (so.tools == StructuredOutput::Tools::kFree) {
    return Internal("ToolCallGrammar: the tool calls are not enforced");
  }
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  std::vector<std::string> names;
  std::vector<int32_t> calls;
  VLS_RETURN_IF_ERROR(AddCalls(&b, tools, limits, &names, &calls));
  if (calls.empty()) return InvalidArgument("\"tools\" is empty").WithParam("tools");

  if (so.tools == StructuredOutput::Tools::kNamed) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == so.tool_name) {
        b.SetAlternatives(root, {{b.Ref(calls[i])}});
        grammar::Grammar g = std::move(b).Build(root);
        VLS_RETURN_IF_ERROR(grammar::ValidateGrammar(g, limits));
        return g;
      }
    }
    return InvalidArgument("\"tool_choice\" names \"" + so.tool_name + "\", which is not in tools")
        .WithParam("tool_choice");
  }
  // any ::= call-0 | call-1 | ...; calls ::= any ("\n" any)*
  const int32_t any = b.AddRule("tool-call");
  std::vector<Sequence> alts;
  alts.reserve(calls.size());
  for (int32_t c : calls) alts.push_back({b.Ref(c)});
  b.SetAlternatives(any, std::move(alts));
  Sequence more = b.Literal("\n");
  more.push_back(b.Ref(any));
  const int32_t rest = b.Repeat("tool-calls-rest", more, 0, -1);
  const int32_t some = b.AddRule("tool-calls");
  b.SetAlternatives(some, {{b.Ref(any), b.Ref(rest)}});

  if (so.tools == StructuredOutput::Tools::kRequired) {
    b.SetAlternatives(root, {{b.Ref(some)}});
  } else if (so.kind != StructuredOutput::Kind::kNone) {
    // kStrict with a reply format: the format, or calls.
    VLS_ASSIGN_OR_RETURN(grammar::Grammar format, ReplyFormatGrammar(so, limits));
    const int32_t f = ImportGrammar(&b, format);
    b.SetAlternatives(root, {{b.Ref(f)}, {b.Ref(some)}});
  } else {
    // kStrict: text without "<tool_call>", then optional calls.
    const int32_t text = AddTextWithoutOpenTag(&b);
    b.SetAlternatives(root, {{b.Ref(text)}, {b.Ref(text), b.Ref(some)}});
  }
  grammar::Grammar g = std::move(b).Build(root);
  VLS_RETURN_IF_ERROR(grammar::ValidateGrammar(g, limits));
  return g;
}

}  // namespace vls
