#include "base/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace vls {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

size_t PageSize() {
  static const size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}
}  // namespace

StatusOr<std::unique_ptr<HugeRegion>> HugeRegion::Allocate(size_t size) {
  const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
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

}  // namespace vls
