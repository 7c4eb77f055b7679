#include "base/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

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

// A bounded read returns the file, or max_bytes + 1 bytes of one over the bound, and ends on a
// device that never does.
TEST(FileTest, ReadFileAtMostStopsOneBytePastTheBound) {
  const std::string p = TempPath("bounded.txt");
  ASSERT_TRUE(WriteStringToFile(p, "0123456789").ok());
  auto all = ReadFileAtMost(p, 10);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, "0123456789");
  auto over = ReadFileAtMost(p, 4);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(*over, "01234");
  auto endless = ReadFileAtMost("/dev/zero", (size_t{3} << 20) + 7);
  ASSERT_TRUE(endless.ok()) << endless.status().ToString();
  EXPECT_EQ(endless->size(), (size_t{3} << 20) + 8);
  EXPECT_EQ(ReadFileAtMost("/nonexistent/x.json", 10).status().code(), StatusCode::kNotFound);
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

// Output paths (OutputFile's rule): what is at the path decides how it is written, and nothing
// but a regular file (or nothing) is ever replaced by one.
class OutputPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempPath(std::string("out_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }
  // Names in the folder (to see that no temporary file is left behind).
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TEST_F(OutputPathTest, ARegularFileIsReplacedWithItsPermissions) {
  const std::string p = Path("a.bin");
  ASSERT_TRUE(WriteStringToFile(p, "old").ok());
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  ASSERT_TRUE(WriteStringToFile(p, "new contents").ok());
  EXPECT_EQ(*ReadFileToString(p), "new contents");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(Names(), std::vector<std::string>{"a.bin"});
}

TEST_F(OutputPathTest, ASymlinkIsWrittenThroughAndKept) {
  const std::string target = Path("target.bin"), link = Path("link.bin");
  ASSERT_TRUE(WriteStringToFile(target, "old").ok());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_TRUE(WriteStringToFile(link, "through the link").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(*ReadFileToString(target), "through the link");
  EXPECT_EQ(Names(), (std::vector<std::string>{"link.bin", "target.bin"}));
  // A relative link resolves from its own folder.
  const std::string rel = Path("rel.bin");
  ASSERT_EQ(::symlink("target.bin", rel.c_str()), 0);
  ASSERT_TRUE(WriteStringToFile(rel, "relative").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(rel));
  EXPECT_EQ(*ReadFileToString(target), "relative");
}

TEST_F(OutputPathTest, ADanglingSymlinkIsRefused) {
  const std::string link = Path("dangling.bin");
  ASSERT_EQ(::symlink(Path("nowhere/x.bin").c_str(), link.c_str()), 0);
  const Status s = WriteStringToFile(link, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.message();
  EXPECT_TRUE(std::filesystem::is_symlink(link));
}

TEST_F(OutputPathTest, ADirectoryIsRefused) {
  const std::string d = Path("sub");
  std::filesystem::create_directories(d);
  const Status s = WriteStringToFile(d, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s.message();
  EXPECT_TRUE(std::filesystem::is_directory(d));
  EXPECT_EQ(Names(), std::vector<std::string>{"sub"});
}

TEST_F(OutputPathTest, DevNullIsWrittenInPlace) {
  if (::access("/dev/null", W_OK) != 0) GTEST_SKIP() << "/dev/null is not writable";
  ASSERT_TRUE(WriteStringToFile("/dev/null", "discarded").ok());
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // Through a link too.
  const std::string link = Path("null");
  ASSERT_EQ(::symlink("/dev/null", link.c_str()), 0);
  ASSERT_TRUE(WriteStringToFile(link, "discarded").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
}

TEST_F(OutputPathTest, AFifoIsWrittenInPlaceOrRefusedWithoutAReader) {
  const std::string fifo = Path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Status s = WriteStringToFile(fifo, "nobody reads");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("no reader"), std::string::npos) << s.message();
  // With a reader: the bytes go down the FIFO.
  const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rd, 0);
  ASSERT_TRUE(WriteStringToFile(fifo, "hello").ok());
  char buf[16] = {};
  EXPECT_EQ(::read(rd, buf, sizeof(buf)), 5);
  EXPECT_EQ(std::string(buf), "hello");
  ::close(rd);
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(Names(), std::vector<std::string>{"fifo"});
}

// The temporary file is a fresh name created O_EXCL: a planted `PATH.tmp` (the old fixed name)
// pointing elsewhere is neither followed nor touched.
TEST_F(OutputPathTest, APlantedTmpLinkIsNotFollowed) {
  const std::string p = Path("out.bin"), victim = Path("victim.bin");
  ASSERT_TRUE(WriteStringToFile(victim, "precious").ok());
  ASSERT_EQ(::symlink(victim.c_str(), (p + ".tmp").c_str()), 0);
  ASSERT_TRUE(WriteStringToFile(p, "output").ok());
  EXPECT_EQ(*ReadFileToString(p), "output");
  EXPECT_EQ(*ReadFileToString(victim), "precious");
  EXPECT_TRUE(std::filesystem::is_symlink(p + ".tmp"));
}

TEST_F(OutputPathTest, AnUncommittedFileLeavesNothingBehind) {
  const std::string p = Path("never.bin");
  {
    auto f = OutputFile::Open(p);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("partial", 7).ok());
  }
  EXPECT_TRUE(Names().empty());
}

}  // namespace
}  // namespace vls
