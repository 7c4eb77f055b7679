#include "base/memory.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace vls {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// n rounded up to whole huge pages (callers check the overflow where n is untrusted).
size_t RoundToHugePages(size_t n) { return (n + kHugePage - 1) / kHugePage * kHugePage; }

size_t PageSize() {
  static const size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}
}  // namespace

StatusOr<std::unique_ptr<HugeRegion>> HugeRegion::Allocate(size_t size) {
  const size_t rounded = RoundToHugePages(size);
  if (rounded < size || rounded > SIZE_MAX - kHugePage) {
    return ResourceExhausted("cannot allocate " + std::to_string(size) + " bytes");
  }
  // Over-allocate by one huge page so the usable part can start on a 2 MiB boundary.
  const size_t mapped = rounded + kHugePage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot allocate " + std::to_string(size) +
                             " bytes of weight memory (mmap failed)");
  }
  auto* base = static_cast<std::byte*>(p);
  const auto addr = reinterpret_cast<uintptr_t>(base);
  std::byte* data = base + ((kHugePage - addr % kHugePage) % kHugePage);
  // Best effort: without transparent huge pages the memory is still correct, only slower.
  (void)::madvise(data, rounded, MADV_HUGEPAGE);
  return std::unique_ptr<HugeRegion>(new HugeRegion(base, mapped, data, size));
}

HugeRegion::~HugeRegion() { ::munmap(base_, mapped_); }

bool HugeRegion::Collapse() {
#ifdef MADV_COLLAPSE
  constexpr int kCollapse = MADV_COLLAPSE;
#else
  constexpr int kCollapse = 25;  // <asm-generic/mman-common.h>; glibc 2.36's <sys/mman.h> lacks it
#endif
  return ::madvise(data_, RoundToHugePages(size_), kCollapse) == 0;
}

uint64_t HugeRegion::HugePageBytes() const {
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (f == nullptr) return 0;
  const auto begin = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t end = begin + RoundToHugePages(size_);
  // The advised part [data_, end) is a mapping of its own (madvise split it from the unadvised
  // slack around it), so whole mappings inside [begin, end) are exactly the region's.
  bool inside = false;
  uint64_t kib = 0, total = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    uintptr_t lo = 0, hi = 0;
    // A mapping's first line is "lo-hi perms ..."; its fields are "Name: value" lines.
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2) {
      inside = lo >= begin && hi <= end;
    } else if (inside && std::sscanf(line, "AnonHugePages: %" SCNu64 " kB", &kib) == 1) {
      total += kib << 10;
    }
  }
  std::fclose(f);
  return std::min<uint64_t>(total, size_);  // the last huge page may reach past size_
}

void ReleaseFilePages(const void* p, size_t n) {
  const size_t page = PageSize();
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + n) / page * page;
  if (last <= first) return;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): madvise takes the page-aligned address back.
  (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void AdviseWillNeed(const void* p, size_t n) {
  const size_t page = PageSize();
  const auto begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(p) + n;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): madvise takes the page-aligned address back.
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

namespace {

// The "<key>: <n> kB" line of a /proc file, in bytes; kUnknown when absent or unreadable.
uint64_t ProcKiB(const char* file, const char* key) {
  std::FILE* f = std::fopen(file, "re");
  if (f == nullptr) return MemoryAvailability::kUnknown;
  char line[256];
  uint64_t out = MemoryAvailability::kUnknown;
  const size_t key_len = std::strlen(key);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, key, key_len) != 0 || line[key_len] != ':') continue;
    uint64_t kib = 0;
    if (std::sscanf(line + key_len + 1, "%" SCNu64, &kib) == 1 && kib < (UINT64_MAX >> 10)) {
      out = kib << 10;
    }
    break;
  }
  std::fclose(f);
  return out;
}

}  // namespace

uint64_t MemoryAvailability::available() const {
  uint64_t space = kUnknown;
  if (address_space_limit != kUnknown) {
    space = address_space_limit > address_space_used ? address_space_limit - address_space_used : 0;
  }
  return std::min(mem_available, space);
}

std::string FormatBytes(uint64_t bytes) {
  char buf[64];
  if (bytes == UINT64_MAX) return "more than 16 EiB (the size overflows)";
  std::snprintf(buf, sizeof(buf), "%.1f GiB (%" PRIu64 " bytes)",
                static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30), bytes);
  return buf;
}

std::string MemoryAvailability::Describe() const {
  std::string out;
  if (mem_available != kUnknown) out = "MemAvailable " + FormatBytes(mem_available);
  if (address_space_limit != kUnknown) {
    if (!out.empty()) out += ", ";
    out += "address-space limit (ulimit -v) " + FormatBytes(address_space_limit) + " with " +
           FormatBytes(address_space_used) + " in use";
  }
  return out.empty() ? "no limit known" : out;
}

MemoryAvailability QueryMemoryAvailability() {
  MemoryAvailability m;
  m.mem_available = ProcKiB("/proc/meminfo", "MemAvailable");
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    m.address_space_limit = static_cast<uint64_t>(rl.rlim_cur);
    const uint64_t used = ProcKiB("/proc/self/status", "VmSize");
    m.address_space_used = used == MemoryAvailability::kUnknown ? 0 : used;
  }
  return m;
}

Status CheckMemoryFits(std::string_view what, uint64_t bytes, const MemoryAvailability& avail) {
  const uint64_t have = avail.available();
  if (bytes != UINT64_MAX && bytes <= have) return Status::Ok();
  return ResourceExhausted(std::string(what) + " needs " + FormatBytes(bytes) + " of memory but " +
                           FormatBytes(have) + " is available (" + avail.Describe() + ")");
}

}  // namespace vls
