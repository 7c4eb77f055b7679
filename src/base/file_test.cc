#include "base/file.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace vls {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return JoinPath(dir ? dir : "/tmp", "vls_file_test_" + name);
}

TEST(FileTest, WriteReadAndMap) {
  const std::string p = TempPath("a.bin");
  ASSERT_TRUE(WriteStringToFile(p, "hello").ok());
  auto s = ReadFileToString(p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "hello");
  auto m = MappedFile::Open(p);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->size(), 5u);
  EXPECT_EQ(static_cast<char>((*m)->data()[4]), 'o');
}

TEST(FileTest, MissingFileIsNotFoundAndNamesPath) {
  auto m = MappedFile::Open("/nonexistent/dir/x.safetensors");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("/nonexistent/dir/x.safetensors"), std::string::npos);
}

TEST(FileTest, EmptyFileMapsToEmpty) {
  const std::string p = TempPath("empty.bin");
  ASSERT_TRUE(WriteStringToFile(p, "").ok());
  auto m = MappedFile::Open(p);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->size(), 0u);
}

TEST(FileTest, PathHelpers) {
  EXPECT_EQ(JoinPath("a/b", "c.json"), "a/b/c.json");
  EXPECT_EQ(JoinPath("a/b/", "c.json"), "a/b/c.json");
  EXPECT_EQ(JoinPath("a", "/abs"), "/abs");
  EXPECT_EQ(DirName("a/b/c.jsonl"), "a/b");
  EXPECT_EQ(DirName("c.jsonl"), ".");
}

}  // namespace
}  // namespace vls
