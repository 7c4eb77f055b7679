// Every command explains itself: its --help names every flag it accepts and carries an example;
// misspelt flags and commands get the nearest known name.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

namespace vls::cli {
namespace {

TEST(CommandTable, EveryFlagIsDocumentedAndEveryCommandHasAnExample) {
  std::set<std::string> names;
  for (const Command& c : Commands()) {
    const CommandSpec spec = c.spec();
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(names.insert(c.name).second) << "listed twice";
    EXPECT_EQ(spec.name, c.name);
    EXPECT_EQ(spec.usage.rfind(std::string("usage: vlstack ") + c.name, 0), 0u)
        << "--help starts with the synopsis";
    std::set<std::string> flags = spec.value_flags;
    flags.insert(spec.bool_flags.begin(), spec.bool_flags.end());
    for (const std::string& f : flags) {
      // "--flag" followed by something that cannot continue a flag name.
      const std::regex documented("--" + f + "([^a-z0-9-]|$)");
      EXPECT_TRUE(std::regex_search(spec.usage, documented)) << "--" << f << " is undocumented";
    }
    ASSERT_FALSE(spec.example.empty());
    EXPECT_NE(spec.example.find(std::string("vlstack ") + c.name), std::string::npos)
        << spec.example;
    EXPECT_EQ(spec.example.back(), '\n');
    // Every flag an example uses is one the command (or the other command it pipes to) has.
    std::smatch m;
    std::string rest = spec.example.substr(0, spec.example.find('\n'));
    while (std::regex_search(rest, m, std::regex("--([a-z0-9-]+)"))) {
      EXPECT_TRUE(flags.count(m[1]) > 0) << "example uses --" << m[1];
      rest = m.suffix();
    }
  }
  EXPECT_EQ(names.size(), 13u);
}

TEST(NearestName, SuggestsCloseNamesOnly) {
  const std::vector<std::string> flags = {"model", "max-tokens", "temperature", "top-p",
                                          "top-k", "prompt",     "help"};
  EXPECT_EQ(NearestName("modle", flags), "model");  // swap
  EXPECT_EQ(NearestName("mdel", flags), "model");   // deletion
  EXPECT_EQ(NearestName("temprature", flags), "temperature");
  EXPECT_EQ(NearestName("max-token", flags), "max-tokens");
  EXPECT_EQ(NearestName("max_tokens", flags), "max-tokens");
  EXPECT_EQ(NearestName("hepl", flags), "help");
  EXPECT_EQ(NearestName("temp", flags), "temperature");  // the one flag it starts
  EXPECT_EQ(NearestName("top", flags), "");              // starts two: ambiguous
  EXPECT_EQ(NearestName("xyzzy", flags), "");
  EXPECT_EQ(NearestName("", flags), "");
  EXPECT_EQ(NearestName("srve", {"serve", "run", "forward"}), "serve");
}

TEST(ArgsParse, UnknownFlagsNameTheNearestKnownOne) {
  char a0[] = "--modle";
  char a1[] = "x";
  char* argv[] = {a0, a1};
  auto r = Args::Parse(2, argv, {"model", "prompt"}, {"quiet"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unknown option --modle; did you mean --model?");
  char b0[] = "-model";
  char* argv2[] = {b0, a1};
  r = Args::Parse(2, argv2, {"model"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unexpected argument '-model'; did you mean --model?");
  char c0[] = "--zzz";
  char* argv3[] = {c0};
  r = Args::Parse(1, argv3, {"model"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unknown option --zzz");
  char d0[] = "-h";
  char* argv4[] = {d0};
  r = Args::Parse(1, argv4, {}, {"help"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->Has("help"));
}

TEST(Version, NamesVersionAbiAndKernels) {
  const std::string v = VersionText();
  EXPECT_EQ(v.rfind("vlstack ", 0), 0u) << v;
  EXPECT_NE(v.find("C ABI version 1"), std::string::npos) << v;
  EXPECT_NE(v.find("kernels: "), std::string::npos) << v;
  EXPECT_NE(v.find("reference"), std::string::npos) << v;
}

}  // namespace
}  // namespace vls::cli
