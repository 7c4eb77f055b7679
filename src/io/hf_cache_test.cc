#include "io/hf_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "base/file.h"

namespace vls {
namespace {

namespace fs = std::filesystem;

class HfCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::temp_directory_path() /
        ("vls_hf_cache_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Lays out <cache>/models--org--name with refs/<ref> -> commit and snapshots/<commit>/ holding
  // config.json (as a link into blobs/, the way huggingface_hub writes it) unless !complete.
  std::string AddRepo(const std::string& cache, const std::string& org, const std::string& name,
                      const std::string& ref, const std::string& commit, bool complete = true) {
    const fs::path repo = root_ / cache / ("models--" + org + "--" + name);
    fs::create_directories(repo / "refs");
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / commit);
    if (!ref.empty()) {
      EXPECT_TRUE(WriteStringToFile((repo / "refs" / ref).string(), commit + "\n").ok());
    }
    if (complete) {
      EXPECT_TRUE(WriteStringToFile((repo / "blobs" / ("b" + commit)).string(), "{}").ok());
      fs::create_symlink(fs::path("../../blobs") / ("b" + commit),
                         repo / "snapshots" / commit / "config.json");
    }
    return (repo / "snapshots" / commit).string();
  }

  std::string Dir(const std::string& cache) const { return (root_ / cache).string(); }

  fs::path root_;
};

TEST(HfRepoId, ParsesIdsAndRevisions) {
  auto r = ParseHfRepoId("Qwen/Qwen3-VL-2B-Instruct");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->org, "Qwen");
  EXPECT_EQ(r->name, "Qwen3-VL-2B-Instruct");
  EXPECT_EQ(r->revision, "main");
  r = ParseHfRepoId("org_1/model.v2@refs/pr/3");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->revision, "refs/pr/3");
  for (const char* bad : {"", "Qwen", "/abs/path", "./model", "a/b/c", "../x", "Org/..", "Org/.x",
                          "Org/-x", "Org/na me", "Org/name@", "Org/name@../x", "Org/name@/x",
                          "Or\xC3\xA9/x", "Org/name@a//b"}) {
    EXPECT_FALSE(ParseHfRepoId(bad).ok()) << bad;
  }
}

TEST(HfCacheDirsTest, FollowsHuggingFaceHubPrecedenceWithoutRepeats) {
  std::map<std::string, std::string> env = {{"HF_HUB_CACHE", "/a"},
                                            {"HF_HOME", "/h"},
                                            {"XDG_CACHE_HOME", "/x"},
                                            {"HOME", "/home/u"},
                                            {"HUGGINGFACE_HUB_CACHE", "/a"}};
  auto get = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(HfCacheDirs(get), (std::vector<std::string>{"/a", "/h/hub", "/x/huggingface/hub",
                                                        "/home/u/.cache/huggingface/hub"}));
  env = {{"HOME", "/home/u"}, {"HF_HOME", ""}};
  EXPECT_EQ(HfCacheDirs(get), (std::vector<std::string>{"/home/u/.cache/huggingface/hub"}));
  env.clear();
  EXPECT_TRUE(HfCacheDirs(get).empty());
}

TEST_F(HfCacheTest, ResolvesMainRefToItsSnapshot) {
  const std::string snap = AddRepo("hub", "Qwen", "Qwen3-VL-2B-Instruct", "main", "0123abcd");
  AddRepo("hub", "Qwen", "Qwen3-VL-2B-Instruct", "", "ffff0000");  // another, older snapshot
  auto dir = ResolveHfRepo(*ParseHfRepoId("Qwen/Qwen3-VL-2B-Instruct"), {Dir("hub")});
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(*dir, snap);
  EXPECT_TRUE(fs::exists(fs::path(*dir) / "config.json"));
}

TEST_F(HfCacheTest, FirstCacheHoldingTheRepoWins) {
  AddRepo("second", "o", "m", "main", "bbbb");
  const std::string first = AddRepo("first", "o", "m", "main", "aaaa");
  auto dir = ResolveHfRepo(*ParseHfRepoId("o/m"), {Dir("missing"), Dir("first"), Dir("second")});
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(*dir, first);
}

TEST_F(HfCacheTest, RevisionsByBranchCommitPrefixAndSingleSnapshot) {
  const std::string dev = AddRepo("hub", "o", "m", "dev", "1234567890abcdef");
  const std::string main_snap = AddRepo("hub", "o", "m", "main", "fedcba9876543210");
  EXPECT_EQ(*ResolveHfRepo(*ParseHfRepoId("o/m@dev"), {Dir("hub")}), dev);
  EXPECT_EQ(*ResolveHfRepo(*ParseHfRepoId("o/m@1234567"), {Dir("hub")}), dev);
  EXPECT_EQ(*ResolveHfRepo(*ParseHfRepoId("o/m"), {Dir("hub")}), main_snap);
  // No refs/main, one snapshot (a hand-copied cache): that one.
  const std::string only = AddRepo("hub", "o", "solo", "", "abcdef0");
  EXPECT_EQ(*ResolveHfRepo(*ParseHfRepoId("o/solo"), {Dir("hub")}), only);
  auto missing = ResolveHfRepo(*ParseHfRepoId("o/m@v2"), {Dir("hub")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no refs/v2 file"), std::string::npos)
      << missing.status().message();
}

TEST_F(HfCacheTest, ErrorsNameEveryPlaceLookedAndWhy) {
  AddRepo("hub", "o", "partial", "main", "abc123", /*complete=*/false);
  auto r = ResolveHfRepo(*ParseHfRepoId("o/partial"), {Dir("empty"), Dir("hub")});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("o/partial"), std::string::npos) << m;
  EXPECT_NE(m.find(Dir("empty") + "/models--o--partial: absent"), std::string::npos) << m;
  EXPECT_NE(m.find("has no config.json"), std::string::npos) << m;

  // A ref file that does not hold a commit hash (a corrupt or hostile cache) is named.
  AddRepo("hub", "o", "bad", "main", "0a0a0a");
  ASSERT_TRUE(
      WriteStringToFile(Dir("hub") + "/models--o--bad/refs/main", "../../../../etc\n").ok());
  r = ResolveHfRepo(*ParseHfRepoId("o/bad"), {Dir("hub")});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not hold a commit hash"), std::string::npos)
      << r.status().message();

  r = ResolveHfRepo(*ParseHfRepoId("o/none"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no cache folder"), std::string::npos);
}

}  // namespace
}  // namespace vls
