// Hostile templates and inputs (issue 15): each limit of jinja_template.h / jinja_value.h
// refuses its attack with kResourceExhausted and a message naming the limit, before the attack
// can take the stack, the CPU or the memory. These run under ASan/UBSan in CI (label untrusted).
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_template.h"

namespace vls {
namespace {

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Parses and renders `src` with `ctx_json` as globals; the status of whichever step failed.
Status RenderStatus(const std::string& src, const std::string& ctx_json = "{}",
                    std::string* out = nullptr) {
  auto t = jinja::Template::Parse(src);
  if (!t.ok()) return t.status();
  auto ctx = jinja::Value::FromJson(nlohmann::ordered_json::parse(ctx_json));
  if (!ctx.ok()) return ctx.status();
  auto r = t->Render(ctx->dict());
  if (!r.ok()) return r.status();
  if (out != nullptr) *out = *r;
  return Status::Ok();
}

void ExpectLimit(const std::string& src, const std::string& limit, const std::string& ctx = "{}") {
  const Status st = RenderStatus(src, ctx);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted)
      << src.substr(0, 80) << " -> " << st.ToString();
  EXPECT_NE(st.message().find(limit), std::string::npos)
      << src.substr(0, 80) << " -> " << st.ToString();
}

TEST(JinjaLimitsTest, DeepSyntaxIsRefusedByTheParser) {
  const int n = 20000;
  ExpectLimit("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}",
              "kMaxTemplateNesting");
  ExpectLimit("{{ " + std::string(n, '[') + std::string(n, ']') + " }}", "kMaxTemplateNesting");
  ExpectLimit("{{ " + Repeat("{'a': ", n) + "1" + std::string(n, '}') + " }}",
              "kMaxTemplateNesting");
  ExpectLimit("{{ " + Repeat("not ", n) + "x }}", "kMaxTemplateNesting");
  ExpectLimit("{{ " + Repeat("- ", n) + "1 }}", "kMaxTemplateNesting");
  ExpectLimit("{{ f" + Repeat("(f", n) + std::string(n + 1, ')') + " }}", "kMaxTemplateNesting");
  ExpectLimit("{{ 1" + Repeat(" if x else 1", n) + " }}", "kMaxTemplateNesting");
  ExpectLimit(Repeat("{% if x %}", n) + Repeat("{% endif %}", n), "kMaxTemplateNesting");
  ExpectLimit(Repeat("{% for x in y %}", n) + Repeat("{% endfor %}", n), "kMaxTemplateNesting");
  ExpectLimit(Repeat("{% macro m() %}", n) + Repeat("{% endmacro %}", n), "kMaxTemplateNesting");
  // Chains parse in loops but build trees one level deeper per link.
  ExpectLimit("{{ 1" + Repeat(" + 1", n) + " }}", "kMaxTemplateTreeDepth");
  ExpectLimit("{{ 'a'" + Repeat(" ~ 'a'", n) + " }}", "kMaxTemplateTreeDepth");
  ExpectLimit("{{ x" + Repeat(" | string", n) + " }}", "kMaxTemplateTreeDepth");
  ExpectLimit("{{ x" + Repeat(".a", n) + " }}", "kMaxTemplateTreeDepth");
  ExpectLimit("{{ x" + Repeat("[0]", n) + " }}", "kMaxTemplateTreeDepth");
  ExpectLimit("{{ 1" + Repeat(" if 1", n) + " }}", "kMaxTemplateTreeDepth");
}

TEST(JinjaLimitsTest, NestingWithinTheLimitsStillWorks) {
  std::string out;
  const int depth = jinja::kMaxTemplateNesting - 4;
  ASSERT_TRUE(RenderStatus("{{ " + std::string(depth, '(') + "7" + std::string(depth, ')') + " }}",
                           "{}", &out)
                  .ok());
  EXPECT_EQ(out, "7");
  ASSERT_TRUE(
      RenderStatus(Repeat("{% if true %}", depth) + "y" + Repeat("{% endif %}", depth), "{}", &out)
          .ok());
  EXPECT_EQ(out, "y");
  // A long elif chain is flat: it is neither nesting nor tree depth.
  ASSERT_TRUE(RenderStatus("{% if false %}" + Repeat("{% elif false %}", 20000) +
                               "{% elif true %}hit{% else %}miss{% endif %}",
                           "{}", &out)
                  .ok());
  EXPECT_EQ(out, "hit");
  ASSERT_TRUE(RenderStatus("{{ 1" + Repeat(" + 1", 200) + " }}", "{}", &out).ok());
  EXPECT_EQ(out, "201");
}

TEST(JinjaLimitsTest, LoopsAndRecursionRunOutOfBudget) {
  ExpectLimit("{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}",
              "kMaxRenderSteps");
  // range() rebuilt in the inner loop: steps or its items' allocations run out.
  ExpectLimit(
      "{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
      "kMaxRender");
  ExpectLimit("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "kMaxMacroDepth");
  // A recursion that fans out: 2^40 calls, each within the depth limits.
  ExpectLimit(
      "{% macro m(n) %}{% if n < 40 %}{{ m(n + 1) }}{{ m(n + 1) }}{% endif %}"
      "{% endmacro %}{{ m(0) }}",
      "kMaxRenderSteps");
  // range() is sized before it is built.
  ExpectLimit("{{ range(1000000000000000000) | length }}", "kMaxRenderAllocBytes");
  ExpectLimit("{% for i in range(-9223372036854775807, 9223372036854775807) %}{% endfor %}",
              "kMaxRenderAllocBytes");
  // Square and multiply: no loop of 10**18 multiplications by 1.
  std::string out;
  ASSERT_TRUE(RenderStatus("{{ 1 ** 1000000000000000000 }} {{ 2 ** 62 }}", "{}", &out).ok());
  EXPECT_EQ(out, "1 4611686018427387904");
  EXPECT_EQ(RenderStatus("{{ 3 ** 1000000000000000000 }}").code(), StatusCode::kOutOfRange);
}

// The deepest evaluation the limits allow (deep expressions inside recursive macros) must fit
// the stack of the ASan/UBSan build as well: kMaxRenderDepth stops it first (or, on a thread
// with less stack, kMinRenderStackBytes).
TEST(JinjaLimitsTest, EvaluationDepthIsBounded) {
  ExpectLimit("{% macro m(n) %}{{ m(n + 1)" + Repeat(" ~ 'x'", 200) + " }}{% endmacro %}{{ m(0) }}",
              "kMaxRenderDepth");
  ExpectLimit("{% macro m(n) %}{{ " + std::string(60, '[') + "m(n + 1)" + std::string(60, ']') +
                  " }}{% endmacro %}{{ m(0) }}",
              "kMaxRenderDepth");
}

struct SmallStackRender {
  std::string source;
  Status status;
};

void* RenderOnThisThread(void* arg) {
  auto* job = static_cast<SmallStackRender*>(arg);
  job->status = RenderStatus(job->source);
  return nullptr;
}

// A thread with a small stack (here 1 MiB, less than kMaxRenderDepth levels take in the ASan
// build): the evaluation stops with an error naming kMinRenderStackBytes, not a crash.
TEST(JinjaLimitsTest, SmallThreadStackStopsEvaluationInTime) {
  SmallStackRender job{
      "{% macro m(n) %}{{ m(n + 1)" + Repeat(" ~ 'x'", 200) + " }}{% endmacro %}{{ m(0) }}",
      Status::Ok()};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, size_t{1} << 20), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, RenderOnThisThread, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(job.status.code(), StatusCode::kResourceExhausted) << job.status.ToString();
  const bool named = job.status.message().find("kMinRenderStackBytes") != std::string::npos ||
                     job.status.message().find("kMaxRenderDepth") != std::string::npos;
  EXPECT_TRUE(named) << job.status.ToString();
}

TEST(JinjaLimitsTest, StringsAreSizedBeforeTheyAreBuilt) {
  ExpectLimit("{{ 'x' * 1000000000 }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ 'xy' * 9223372036854775807 }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ [1, 2] * 9223372036854775807 }}", "kMaxRenderAllocBytes");
  ExpectLimit(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "kMaxRenderOutputBytes");
  ExpectLimit(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}",
      "kMaxRenderOutputBytes");
  ExpectLimit(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
      "{% endfor %}",
      "kMaxRenderAllocBytes");
  ExpectLimit("{{ 'a\nb' | indent(1000000000) }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ 'a\nb' | indent(10000000, true) }}{{ 'a\nb' | indent(10000000, true) }}",
              "kMaxRenderOutputBytes");
  ExpectLimit("{{ ('\n' * 1000000) | indent(100, blank=true) }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ [[[[1]]]] | tojson(indent=1000000000) }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ [[[[1]]]] | tojson(indent=5000000) }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ ('a' * 1000000).replace('a', 'b' * 100) }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ ('a' * 1000000) | replace('', 'bbbbbbbbbbbbbbbbbbbb') }}",
              "kMaxRenderOutputBytes");
  ExpectLimit("{{ ['a' * 10000000, 'b' * 10000000] | join }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ ('x' * 10000000).join(['a', 'b', 'c']) }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ ['a' * 10000000, 'b' * 10000000] }}", "kMaxRenderOutputBytes");
  ExpectLimit("{{ ['\\x01' * 10000000] | tojson }}", "kMaxRenderOutputBytes");
  // The output as a whole.
  ExpectLimit("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}", "kMaxRenderOutputBytes");
  ExpectLimit("{% set s %}{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}{% endset %}",
              "kMaxRenderOutputBytes");
  // Strings within the limit but too many of them: the allocation budget.
  ExpectLimit("{% for i in range(1000) %}{% set s = 'x' * 10000000 %}{% endfor %}",
              "kMaxRenderAllocBytes");
  ExpectLimit("{{ ('a' * 10000000).split('a') | length }}", "kMaxRenderAllocBytes");
  ExpectLimit("{% for c in 'a' * 10000000 %}{% endfor %}", "kMaxRenderAllocBytes");
}

TEST(JinjaLimitsTest, QuadraticWorkIsCharged) {
  // Substring search is linear (two-way), even on inputs where naive search is O(n*m).
  std::string out;
  ASSERT_TRUE(RenderStatus("{% set h = 'a' * 4000000 %}{% set n = 'a' * 2000000 ~ 'b' %}"
                           "{{ n in h }} {{ h.find(n) }} {{ h.rfind(n) }} {{ h.count(n) }} "
                           "{{ h.split(n) | length }} {{ h.rsplit(n) | length }}",
                           "{}", &out)
                  .ok());
  EXPECT_EQ(out, "False -1 -1 0 1 1");
  ExpectLimit("{{ range(100000) | unique | length }}", "kMaxRenderSteps");
  ExpectLimit(
      "{% set s = 'a' * 10000000 %}{% for i in range(1000000) %}{{ s | length }}"
      "{% endfor %}",
      "kMaxRenderSteps");
  std::string out2;
  ASSERT_TRUE(RenderStatus("{% set s = 'ab' * 1000000 %}{% for i in range(10000) %}{{ s[-1] }}"
                           "{{ s[i] }}{% endfor %}",
                           "{}", &out2)
                  .ok());
  EXPECT_EQ(out2.substr(0, 6), "babbba");
  ExpectLimit(
      "{% set s = 'a' * 10000000 %}{% for i in range(1000000) %}{% if s == s %}{% endif %}"
      "{% endfor %}",
      "kMaxRenderSteps");
}

TEST(JinjaLimitsTest, DeepValuesAreRefused) {
  // From JSON: deeper than kMaxValueDepth is refused without recursing into it.
  const int n = 100000;
  auto deep = nlohmann::ordered_json::parse(std::string(n, '[') + std::string(n, ']'));
  auto v = jinja::Value::FromJson(deep, "messages");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(v.status().message().find("kMaxValueDepth"), std::string::npos);
  EXPECT_NE(v.status().message().find("messages"), std::string::npos);
  const int ok_depth = jinja::kMaxValueDepth - 1;
  ASSERT_TRUE(jinja::Value::FromJson(nlohmann::ordered_json::parse(std::string(ok_depth, '[') +
                                                                   std::string(ok_depth, ']')))
                  .ok());
  // Built by the template, one level per iteration.
  ExpectLimit(
      "{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}",
      "kMaxValueDepth");
  ExpectLimit(
      "{% set ns = namespace(x=1) %}{% for i in range(100000) %}"
      "{% set ns.x = {'a': ns.x} %}{% endfor %}",
      "kMaxValueDepth");
  // Deep values print, compare and serialise within the bound.
  const std::string d = std::string(100, '[') + "1" + std::string(100, ']');
  std::string out;
  ASSERT_TRUE(RenderStatus("{{ x == x }}{{ x | tojson | length }}{{ x | string | length }}"
                           "{{ x < x }}",
                           "{\"x\": " + d + "}", &out)
                  .ok());
  EXPECT_EQ(out, "True201201False");
  // Too many values in one input.
  std::string wide = "[0";
  for (int64_t i = 0; i < jinja::kMaxTemplateInputValues; ++i) wide += ",0";
  wide += "]";
  auto w = jinja::Value::FromJson(nlohmann::ordered_json::parse(wide), "tools");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("kMaxTemplateInputValues"), std::string::npos);
}

TEST(JinjaLimitsTest, NamespacesCannotHoldNamespaces) {
  const Status st = RenderStatus("{% set ns = namespace(a=1) %}{% set ns.self = ns %}");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot hold a namespace"), std::string::npos) << st.ToString();
  EXPECT_FALSE(RenderStatus("{% set ns = namespace() %}{% set ns.l = [1, [ns]] %}").ok());
  EXPECT_FALSE(RenderStatus("{% set a = namespace() %}{% set b = namespace(x=a) %}").ok());
}

TEST(JinjaLimitsTest, SmallerBudgetsApply) {
  auto t = jinja::Template::Parse("{% for i in range(1000) %}{{ i }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  jinja::RenderLimits limits;
  limits.max_steps = 500;
  auto r = t->Render({}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kMaxRenderSteps (500"), std::string::npos);
  limits = {};
  limits.max_output_bytes = 100;
  r = t->Render({}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kMaxRenderOutputBytes (100)"), std::string::npos);
  EXPECT_TRUE(t->Render({}).ok());
}

// RenderChat on hostile requests: errors, never exceptions.
TEST(ChatTemplateLimitsTest, HostileRequestsAreErrors) {
  auto t = jinja::Template::Parse(
      "{% for m in messages %}{{ m.content }}{% endfor %}{{ add_generation_prompt }}");
  ASSERT_TRUE(t.ok());
  auto render = [&](const std::string& json) {
    return tok::RenderChat(*t, nlohmann::ordered_json::parse(json));
  };
  auto ok = render(R"({"messages": [{"content": "hi"}], "add_generation_prompt": null})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "hiFalse");
  auto bad = render(R"({"messages": [], "add_generation_prompt": "yes"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("add_generation_prompt"), std::string::npos);
  EXPECT_FALSE(render(R"({"messages": 5})").ok());
  EXPECT_FALSE(render("[]").ok());
  const int n = 100000;
  auto deep =
      render(R"({"messages": [{"content": )" + std::string(n, '[') + std::string(n, ']') + "}]}");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("kMaxValueDepth"), std::string::npos);
  auto deep_extra =
      render(R"({"messages": [], "x": )" + Repeat("{\"a\":", n) + "1" + std::string(n, '}') + "}");
  ASSERT_FALSE(deep_extra.ok());
  EXPECT_NE(deep_extra.status().message().find("\"x\""), std::string::npos);
}

class ChatTemplateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vls_chat_template_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& text) {
    std::string path = (dir_ / "tokenizer_config.json").string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateFileTest, MalformedConfigsAreErrorsNamingTheField) {
  auto load = [&](const std::string& text) { return tok::LoadChatTemplateFile(Write(text)); };
  auto good = load(R"({"chat_template": "{{ x }}"})");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, "{{ x }}");
  auto listed = load(R"({"chat_template": [{"name": "tool_use", "template": 3},
                                           {"name": "default", "template": "D"}]})");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, "D");
  struct Case {
    std::string text;
    std::string needle;
  };
  const Case cases[] = {
      {R"({"chat_template": 5})", "chat_template"},
      {R"({"chat_template": null})", "chat_template"},
      {R"({"chat_template": {"a": 1}})", "chat_template"},
      {R"({"chat_template": [5]})", "chat_template[0]"},
      {R"({"chat_template": [{"name": 1, "template": "x"}]})", "chat_template[0].name"},
      {R"({"chat_template": [{"name": "default", "template": 7}]})", "chat_template[0].template"},
      {R"({"chat_template": [{"name": "default"}]})", "chat_template[0]"},
      {R"({"chat_template": []})", "default"},
      {R"({})", "chat_template"},
      {R"([])", "not a JSON object"},
      {R"({"chat_template": "a", "chat_template": "b"})", "chat_template"},
      {R"({"chat_template": "a"} trailing)", "tokenizer_config.json"},
      {std::string("{\"chat_template\": \"a\"}\0x", 24), "tokenizer_config.json"},
      {"{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
       "tokenizer_config.json"},
      {"", "tokenizer_config.json"},
  };
  for (const Case& c : cases) {
    auto r = load(c.text);
    ASSERT_FALSE(r.ok()) << c.text.substr(0, 80);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.text.substr(0, 80) << " -> " << r.status().ToString();
  }
}

}  // namespace
}  // namespace vls
