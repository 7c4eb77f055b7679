#include "base/memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

namespace vls {
namespace {

// Whether transparent huge pages are enabled at all ("never" is the bracketed mode otherwise).
bool TransparentHugePagesEnabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  return std::getline(f, modes) && modes.find("[never]") == std::string::npos;
}

TEST(MemoryTest, CollapseBacksFourKibPagesWithHugeOnesKeepingTheBytes) {
  constexpr size_t kSize = size_t{8} << 20;
  auto region = HugeRegion::Allocate(kSize);
  ASSERT_TRUE(region.ok()) << region.status().message();
  HugeRegion& r = **region;
  // Fault the pages in as 4 KiB ones (as in a load whose memory is fragmented), then allow huge
  // pages again.
  ASSERT_EQ(::madvise(r.data(), kSize, MADV_NOHUGEPAGE), 0);
  for (size_t i = 0; i < kSize; ++i) r.data()[i] = static_cast<std::byte>(i * 131 % 251);
  EXPECT_EQ(r.HugePageBytes(), 0u);
  ASSERT_EQ(::madvise(r.data(), kSize, MADV_HUGEPAGE), 0);
  if (!TransparentHugePagesEnabled()) GTEST_SKIP() << "transparent huge pages are off";
  if (!r.Collapse()) {
    GTEST_SKIP() << "the kernel did not collapse the region (before Linux 6.1, or no free huge "
                    "page): "
                 << std::strerror(errno);
  }
  EXPECT_EQ(r.HugePageBytes(), kSize);
  size_t differ = 0;
  for (size_t i = 0; i < kSize; ++i) {
    differ += r.data()[i] != static_cast<std::byte>(i * 131 % 251) ? 1 : 0;
  }
  EXPECT_EQ(differ, 0u);
}

TEST(MemoryTest, AvailableIsTheSmallerOfMemAvailableAndTheAddressSpaceLeft) {
  MemoryAvailability m;
  EXPECT_EQ(m.available(), MemoryAvailability::kUnknown);
  m.mem_available = uint64_t{8} << 30;
  EXPECT_EQ(m.available(), uint64_t{8} << 30);
  m.address_space_limit = uint64_t{4} << 30;
  m.address_space_used = uint64_t{1} << 30;
  EXPECT_EQ(m.available(), uint64_t{3} << 30);
  m.address_space_used = uint64_t{5} << 30;  // over the limit already
  EXPECT_EQ(m.available(), 0u);
}

TEST(MemoryTest, CheckMemoryFitsNamesTheNeedAndWhatIsAvailable) {
  MemoryAvailability m;
  m.mem_available = uint64_t{16} << 30;
  m.address_space_limit = uint64_t{4} << 30;
  m.address_space_used = uint64_t{1} << 30;
  EXPECT_TRUE(CheckMemoryFits("x", uint64_t{3} << 30, m).ok());
  const Status s = CheckMemoryFits("the KV cache", uint64_t{8} << 30, m);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("the KV cache needs 8.0 GiB (8589934592 bytes) of memory but 3.0 GiB "
                             "(3221225472 bytes) is available"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("MemAvailable 16.0 GiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("address-space limit (ulimit -v) 4.0 GiB"), std::string::npos);
  // An overflowed size (UINT64_MAX) never fits, even with no limit known.
  const Status o = CheckMemoryFits("x", UINT64_MAX, MemoryAvailability{});
  EXPECT_EQ(o.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(o.message().find("overflows"), std::string::npos) << o.message();
}

TEST(MemoryTest, QueryReadsMemAvailable) {
  const MemoryAvailability m = QueryMemoryAvailability();
  EXPECT_NE(m.mem_available, MemoryAvailability::kUnknown);  // Linux has /proc/meminfo
  EXPECT_GT(m.mem_available, 0u);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(MemoryTest, QuerySeesTheAddressSpaceLimit) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = rlim_t{4} << 30;
    if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(3);
    const MemoryAvailability m = QueryMemoryAvailability();
    const bool ok = m.address_space_limit == (uint64_t{4} << 30) && m.address_space_used > 0 &&
                    m.available() < (uint64_t{4} << 30);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif

}  // namespace
}  // namespace vls
