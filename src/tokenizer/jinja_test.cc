// Template engine and chat-template tests: exact outputs of small templates (checked against
// Python Jinja2 by hand), hostile templates that must fail cleanly, placeholder expansion.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_template.h"

namespace vls {
namespace {

std::string Render(const std::string& src, const std::string& ctx_json = "{}") {
  auto t = jinja::Template::Parse(src);
  if (!t.ok()) return "PARSE: " + t.status().message();
  auto ctx = jinja::Value::FromJson(nlohmann::ordered_json::parse(ctx_json));
  if (!ctx.ok()) return "INPUT: " + ctx.status().message();
  auto out = t->Render(ctx->dict());
  if (!out.ok()) return "RENDER: " + out.status().message();
  return *out;
}

TEST(JinjaTest, WhitespaceControlAsTransformersConfiguresIt) {
  EXPECT_EQ(Render("{% if true %}\n  x\n{% endif %}\n"), "  x\n");
  EXPECT_EQ(Render("  {% if true %}a{% endif %}  b"), "a  b");
  EXPECT_EQ(Render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Render("a\n  {#- c -#}\n b"), "ab");
  EXPECT_EQ(Render("line\r\nnext\r\n"), "line\nnext");
}

TEST(JinjaTest, ForLoopScopesAndLoopVariables) {
  EXPECT_EQ(
      Render("{% for x in [1,2] %}{% if x == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}"),
      "[5][]");
  EXPECT_EQ(Render("{% for x in 'ab' %}{{ loop.index0 }}{{ x }}{{ loop.last }}{% endfor %}"),
            "0aFalse1bTrue");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "3");
}

TEST(JinjaTest, PythonValueSemantics) {
  EXPECT_EQ(Render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(Render("{{ 1e20 }} {{ 10/2 }} {{ -7//2 }} {{ -7 % 3 }}"), "1e+20 5.0 -4 2");
  EXPECT_EQ(Render("{{ x | tojson }}", R"({"x": {"b": "é\n", "a": [1.0, null]}})"),
            R"({"b": "é\n", "a": [1.0, null]})");
  EXPECT_EQ(Render("{{ m.content.split('</think>')[-1].lstrip('\\n') }}",
                   R"({"m": {"content": "<think>r</think>\n\nanswer"}})"),
            "answer");
}

TEST(JinjaTest, RepetitionAsPython) {
  EXPECT_EQ(Render("[{{ 'ab' * 3 }}|{{ 'abc' * 5 }}|{{ 'x' * 1 }}|{{ 'x' * 0 }}|{{ 'x' * -2 }}]"),
            "[ababab|abcabcabcabcabc|x||]");
  EXPECT_EQ(Render("{{ '' * 7 }}|{{ ('ab' * 1000) | length }}|{{ ('xyz' * 333)[-4:] }}"),
            "|2000|zxyz");
  EXPECT_EQ(Render("{{ [1, 'a'] * 2 }}"), "[1, 'a', 1, 'a']");
}

// Hostile or unsupported templates fail with a message naming the problem; none crash.
TEST(JinjaUntrustedTest, BadTemplatesFailCleanly) {
  auto fails = [](const std::string& src, const std::string& needle) {
    const std::string r = Render(src);
    EXPECT_TRUE(r.rfind("PARSE:", 0) == 0 || r.rfind("RENDER:", 0) == 0) << src << " -> " << r;
    EXPECT_NE(r.find(needle), std::string::npos) << src << " -> " << r;
  };
  fails("{% include 'x' %}", "include");
  fails("{{ 1 | frobnicate }}", "frobnicate");
  fails("{{ 1 is weird }}", "weird");
  fails("{% for %}", "expected a name");
  fails("{{ 'unterminated", "unterminated");
  fails("{% if x %}", "end of template");
  fails("{{ raise_exception('boom') }}", "boom");
  fails("{{ undefined_var.attr }}", "undefined_var");
  fails("{{ 1 // 0 }}", "zero");
  fails("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "kMaxMacroDepth");
  fails("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "deep");
  fails("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}", "deep");
  fails("{{ 'a' * 100000000 }}", "kMaxRenderOutputBytes");
  fails("{{ range(10000000) }}", "kMaxRenderAllocBytes");
  fails("\xff{{ x }}", "UTF-8");
}

TEST(ChatTemplateTest, ToolsAndDocumentsAreNoneWhenAbsent) {
  auto t = jinja::Template::Parse(
      "{{ tools is none }} {{ documents is defined }} {{ add_generation_prompt }}");
  ASSERT_TRUE(t.ok());
  auto out = tok::RenderChat(*t, nlohmann::ordered_json::parse(R"({"messages": []})"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "True True False");
  EXPECT_FALSE(tok::RenderChat(*t, nlohmann::ordered_json::parse("{}")).ok());
}

TEST(ChatTemplateTest, ExpandsImagePadsPerGrid) {
  const int32_t pad = 151655;
  const std::vector<int32_t> ids = {1, pad, 2, pad, 3};
  const std::vector<GridThw> grids = {{1, 4, 4}, {2, 2, 2}};
  auto out = tok::ExpandVisualPads(ids, pad, grids);
  ASSERT_TRUE(out.ok());
  std::vector<int32_t> want = {1, pad, pad, pad, pad, 2, pad, pad, 3};
  EXPECT_EQ(*out, want);
  EXPECT_FALSE(tok::ExpandVisualPads(ids, pad, std::vector<GridThw>{{1, 4, 4}}).ok());
  EXPECT_FALSE(tok::ExpandVisualPads(ids, pad, std::vector<GridThw>{{1, 3, 3}, {1, 2, 2}}).ok());
  EXPECT_FALSE(tok::ExpandVisualPads(ids, pad, std::vector<GridThw>{{1, 0, 4}, {1, 2, 2}}).ok());
  EXPECT_FALSE(
      tok::ExpandVisualPads(ids, pad, std::vector<GridThw>{{1 << 20, 1 << 20, 1 << 20}, {1, 2, 2}})
          .ok());
  // Each side is valid but the expansion (4096 * 4096 pads plus the text) passes 2^24 tokens.
  auto huge = tok::ExpandVisualPads(ids, pad, std::vector<GridThw>{{1, 8192, 8192}, {1, 2, 2}});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("expands the sequence"), std::string::npos)
      << huge.status().message();
}

}  // namespace
}  // namespace vls
