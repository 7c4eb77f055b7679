// The JSON-Schema-Test-Suite (Debian's json-schema-test-suite, the newest draft installed, with
// optional/format) against the JSON Schema front end and the matcher: every schema is either
// compiled or refused with an error that names a keyword; for a compiled one, every instance
// marked valid, written compactly with its keys in the schema's property order (our grammar's
// order), is accepted and every instance marked invalid is refused, except the disagreements
// listed in kExceptions with the reason each is expected.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/json_schema_test_util.h"

namespace vls::grammar {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kSuiteRoot = "/usr/share/json-schema-test-suite/tests";

// "file|group|test" -> why the grammar and the suite disagree there.
const std::map<std::string, std::string>& Exceptions() {
  static const auto* kMap = new std::map<std::string, std::string>{
#include "grammar/json_schema_suite_exceptions.inc"
  };
  return *kMap;
}

// Keys of objects in the order the schema's properties give them (then the rest as they came),
// following $ref, items and properties: the order our grammar writes them in.
Json Reorder(const Json& v, const Json& schema, const Json& root, int depth = 0) {
  if (depth > 32 || !schema.is_object()) return v;
  if (schema.contains("$ref") && schema["$ref"].is_string()) {
    const std::string ref = schema["$ref"].get<std::string>();
    if (ref.rfind('#', 0) == 0) {
      try {
        const Json& t = ref == "#" ? root : root.at(Json::json_pointer(ref.substr(1)));
        return Reorder(v, t, root, depth + 1);
      } catch (const std::exception&) {
        return v;
      }
    }
    return v;
  }
  if (v.is_object()) {
    Json out = Json::object();
    // The properties of the schema, then of its allOf members (the order they merge in).
    std::vector<const Json*> sources = {&schema};
    if (schema.contains("allOf") && schema["allOf"].is_array()) {
      for (const Json& member : schema["allOf"]) sources.push_back(&member);
    }
    for (const Json* src : sources) {
      if (!src->is_object() || !src->contains("properties") || !(*src)["properties"].is_object()) {
        continue;
      }
      for (const auto& [k, sub] : (*src)["properties"].items()) {
        if (v.contains(k) && !out.contains(k)) out[k] = Reorder(v[k], sub, root, depth + 1);
      }
    }
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const Json& r : schema["required"]) {
        if (r.is_string() && v.contains(r.get<std::string>()) && !out.contains(r)) {
          out[r.get<std::string>()] = v[r.get<std::string>()];
        }
      }
    }
    for (const auto& [k, x] : v.items()) {
      if (!out.contains(k)) {
        const Json* sub = nullptr;
        if (schema.contains("additionalProperties")) sub = &schema["additionalProperties"];
        out[k] = sub != nullptr ? Reorder(x, *sub, root, depth + 1) : x;
      }
    }
    return out;
  }
  if (v.is_array() && schema.contains("items")) {
    Json out = Json::array();
    for (size_t i = 0; i < v.size(); ++i) {
      const Json& items = schema["items"];
      const Json& sub = items.is_array() ? (i < items.size() ? items[i] : Json(true)) : items;
      out.push_back(Reorder(v[i], sub, root, depth + 1));
    }
    return out;
  }
  return v;
}

std::vector<fs::path> SuiteFiles(std::string* draft) {
  std::vector<fs::path> files;
  std::vector<std::string> drafts;
  for (const auto& e : fs::directory_iterator(kSuiteRoot)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("draft", 0) == 0 && name.size() == 6) drafts.push_back(name);  // draft3..9
  }
  if (drafts.empty()) return files;
  std::sort(drafts.begin(), drafts.end());
  *draft = drafts.back();
  const fs::path dir = fs::path(kSuiteRoot) / *draft;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  for (const fs::path& sub : {dir / "optional", dir / "optional" / "format"}) {
    if (!fs::exists(sub)) continue;
    for (const auto& e : fs::directory_iterator(sub)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The keyword an error names ("not", "$ref", "format"), or "" if it names none.
std::string KeywordOf(const std::string& error) {
  for (const char* marker : {"keyword \"", "unsupported \"", "unresolved \"", "invalid \""}) {
    const size_t at = error.find(marker);
    if (at == std::string::npos) continue;
    const size_t start = at + std::string(marker).size();
    const size_t end = error.find('"', start);
    if (end != std::string::npos) return error.substr(start, end - start);
  }
  if (error.find("unsupported format") != std::string::npos) return "format";
  if (error.find("accepts no value") != std::string::npos) return "(accepts no value)";
  return "";
}

TEST(JsonSchemaSuiteTest, CompiledOrRefusedByKeywordAndHonoured) {
  std::string draft;
  if (!fs::exists(kSuiteRoot)) GTEST_SKIP() << "json-schema-test-suite is not installed";
  const std::vector<fs::path> files = SuiteFiles(&draft);
  ASSERT_FALSE(files.empty());
  int compiled = 0;
  int refused = 0;
  int agree = 0;
  int listed = 0;
  std::map<std::string, int> refused_by;
  std::set<std::string> used_exceptions;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const Json groups = Json::parse(text.str());
    const std::string parent = file.parent_path().filename().string();
    const std::string fname = parent == "format" || parent == "optional"
                                  ? parent + "/" + file.filename().string()
                                  : file.filename().string();
    for (const Json& group : groups) {
      const Json& schema = group["schema"];
      const std::string gname = group["description"].get<std::string>();
      StatusOr<Grammar> g = JsonSchemaToGrammar(schema, JsonSchemaOptions{}, GrammarLimits{});
      if (!g.ok()) {
        const std::string kw = KeywordOf(g.status().message());
        EXPECT_FALSE(kw.empty()) << fname << " | " << gname << ": " << g.status().message();
        ++refused;
        ++refused_by[kw];
        continue;
      }
      ++compiled;
      const auto c = testing_util::CompileForBytes(*g);
      for (const Json& t : group["tests"]) {
        const std::string key = fname + "|" + gname + "|" + t["description"].get<std::string>();
        const std::string instance = Reorder(t["data"], schema, schema).dump();
        const bool valid = t["valid"].get<bool>();
        if (testing_util::Accepts(c, instance) == valid) {
          ++agree;
          continue;
        }
        if (Exceptions().count(key) != 0) {
          ++listed;
          used_exceptions.insert(key);
          continue;
        }
        ADD_FAILURE() << "\"" << key << "\": " << (valid ? "valid " : "invalid ") << instance
                      << (valid ? " refused" : " accepted");
      }
    }
  }
  for (const auto& [key, why] : Exceptions()) {
    EXPECT_TRUE(used_exceptions.count(key)) << "stale exception: " << key;
  }
  std::printf(
      "JSON-Schema-Test-Suite %s: %d schemas compiled, %d refused; instances: %d agree, "
      "%d listed exceptions\nrefused by keyword:",
      draft.c_str(), compiled, refused, agree, listed);
  for (const auto& [kw, n] : refused_by) std::printf(" %s=%d", kw.c_str(), n);
  std::printf("\n");
}

}  // namespace
}  // namespace vls::grammar
