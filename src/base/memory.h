// Large owned memory: anonymous, 2 MiB-aligned regions backed by transparent huge pages where
// the kernel allows it, and page release for read-only file mappings.
//
// Decode streams every weight byte once per token. From a file mapping with 4 KiB pages the
// hardware prefetcher stops at every page boundary and the TLB misses on every page; weights
// copied into huge pages stream at close to memory bandwidth.
#ifndef VLSTACK_BASE_MEMORY_H_
#define VLSTACK_BASE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vls {

// A zero-filled, writable, 2 MiB-aligned anonymous mapping of at least `size` bytes, advised
// MADV_HUGEPAGE. Thread safety: the region is plain memory; callers synchronise access.
class HugeRegion {
 public:
  // ResourceExhausted (naming the size) when the mapping fails.
  static StatusOr<std::unique_ptr<HugeRegion>> Allocate(size_t size);
  ~HugeRegion();
  HugeRegion(const HugeRegion&) = delete;
  HugeRegion& operator=(const HugeRegion&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

  // Asks the kernel to back the region with huge pages now (MADV_COLLAPSE, Linux 6.1 and
  // later). Pages first touched while no huge page was free (physical memory fragmented, a
  // checkpoint's page cache filling the rest) are 4 KiB ones, which a decode tile reads at
  // about 0.7 of the rate of huge ones (ADR 0036). Best effort, and quick when it fails: true
  // when the kernel reports the whole region collapsed; false (errno set) when it could not
  // allocate or collapse some of it, or lacks MADV_COLLAPSE.
  bool Collapse();
  // The bytes of the region backed by huge pages now (AnonHugePages of /proc/self/smaps over
  // the region's mappings); 0 when that cannot be read.
  uint64_t HugePageBytes() const;

 private:
  HugeRegion(std::byte* base, size_t mapped, std::byte* data, size_t size)
      : base_(base), mapped_(mapped), data_(data), size_(size) {}
  std::byte* base_;
  size_t mapped_;
  std::byte* data_;
  size_t size_;
};

// Drops the resident pages fully inside [p, p + n) of a read-only private file mapping
// (MADV_DONTNEED). The bytes stay readable: a later access faults them back in from the file.
// Used after a checkpoint tensor has been copied into prepared weights, so the process does
// not hold both copies.
void ReleaseFilePages(const void* p, size_t n);

// Asks the kernel to read [p, p + n) of a file mapping ahead (MADV_WILLNEED); best effort.
void AdviseWillNeed(const void* p, size_t n);

// How much more memory this process can take now: the smaller of what the system can give
// (MemAvailable of /proc/meminfo) and what its address-space limit leaves (RLIMIT_AS minus the
// VmSize of /proc/self/status). A figure that cannot be read counts as unlimited.
struct MemoryAvailability {
  static constexpr uint64_t kUnknown = UINT64_MAX;
  uint64_t mem_available = kUnknown;        // bytes
  uint64_t address_space_limit = kUnknown;  // bytes; kUnknown when unlimited
  uint64_t address_space_used = 0;          // bytes
  uint64_t available() const;
  // "MemAvailable 21.3 GiB, address-space limit 4.0 GiB with 1.2 GiB in use" (the known parts).
  std::string Describe() const;
};
MemoryAvailability QueryMemoryAvailability();

// "1.5 GiB (1610612736 bytes)": a byte count for error messages.
std::string FormatBytes(uint64_t bytes);

// ResourceExhausted when `bytes` (what `what` needs) exceed avail.available(); the message gives
// both figures and where the limit comes from. Callers compute `bytes` with checked arithmetic
// (base/checked_math.h) and pass UINT64_MAX on overflow.
Status CheckMemoryFits(std::string_view what, uint64_t bytes, const MemoryAvailability& avail);

}  // namespace vls

#endif  // VLSTACK_BASE_MEMORY_H_
