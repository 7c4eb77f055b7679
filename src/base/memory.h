// Large owned memory: anonymous, 2 MiB-aligned regions backed by transparent huge pages where
// the kernel allows it, and page release for read-only file mappings.
//
// Decode streams every weight byte once per token. From a file mapping with 4 KiB pages the
// hardware prefetcher stops at every page boundary and the TLB misses on every page; weights
// copied into huge pages stream at close to memory bandwidth.
#ifndef VLSTACK_BASE_MEMORY_H_
#define VLSTACK_BASE_MEMORY_H_

#include <cstddef>
#include <memory>

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

}  // namespace vls

#endif  // VLSTACK_BASE_MEMORY_H_
