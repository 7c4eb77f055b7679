#include "base/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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

TEST(FileTest, ReadAtCopiesMappedBytesAndChecksTheRange) {
  const std::string p = TempPath("readat.bin");
  std::string contents(10000, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 7 + 3);
  ASSERT_TRUE(WriteStringToFile(p, contents).ok());
  auto m = MappedFile::Open(p);
  ASSERT_TRUE(m.ok());
  const MappedFile& f = **m;
  std::string got(5000, 'x');
  ASSERT_TRUE(f.ReadAt(f.data() + 4096, 5000, got.data()).ok());
  EXPECT_EQ(got, contents.substr(4096, 5000));
  ASSERT_TRUE(f.ReadAt(f.data() + 9999, 1, got.data()).ok());  // the last byte
  EXPECT_EQ(got[0], contents[9999]);
  EXPECT_TRUE(f.ReadAt(f.data() + 10000, 0, got.data()).ok());
  // Outside the mapping: past the end, straddling the end, before the start.
  for (const auto& [at, n] : {std::pair<ptrdiff_t, size_t>{10000, 1}, {9000, 1001}, {-1, 1}}) {
    const Status s = f.ReadAt(f.data() + at, n, got.data());
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << at << " " << n;
    EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  }
}

TEST(FileTest, ReadAtOfAFileTruncatedSinceMappingIsAnIoError) {
  const std::string p = TempPath("truncated.bin");
  ASSERT_TRUE(WriteStringToFile(p, std::string(8192, 'a')).ok());
  auto m = MappedFile::Open(p);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(::truncate(p.c_str(), 100), 0);
  std::string got(4096, 'x');
  const Status s = (*m)->ReadAt((*m)->data() + 4096, 4096, got.data());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("shorter"), std::string::npos) << s.message();
  ASSERT_TRUE((*m)->ReadAt((*m)->data(), 100, got.data()).ok());  // what is still there
  EXPECT_EQ(got.substr(0, 100), std::string(100, 'a'));
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
