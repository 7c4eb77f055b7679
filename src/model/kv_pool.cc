#include "model/kv_pool.h"

#include <sys/mman.h>

#include <string>

#include "base/checked_math.h"

namespace vls {

std::optional<uint64_t> KvPool::BlockBytes(const KvShape& shape, int block_keys) {
  const int64_t dims[] = {2, shape.layers, shape.kv_heads, block_keys, shape.head_dim};
  return CheckedByteCount(dims, shape.element_bytes());
}

StatusOr<std::shared_ptr<KvPool>> KvPool::Create(const KvShape& shape, int block_keys,
                                                 int64_t blocks) {
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.head_dim <= 0) {
    return InvalidArgument("KV pool: layers, kv heads and head dim must be positive");
  }
  if (block_keys <= 0 || (shape.key_tiles && block_keys % 16 != 0)) {
    return InvalidArgument("KV pool: a block of " + std::to_string(block_keys) +
                           " positions (positive, a multiple of 16 with key tiles)");
  }
  if (blocks <= 0 || blocks > INT32_MAX) {
    return InvalidArgument("KV pool: " + std::to_string(blocks) + " blocks is outside [1, " +
                           std::to_string(INT32_MAX) + "]");
  }
  const std::optional<uint64_t> block = BlockBytes(shape, block_keys);
  const std::optional<uint64_t> total =
      block ? CheckedMul(*block, static_cast<uint64_t>(blocks)) : std::nullopt;
  if (!total || *total > SIZE_MAX / 2) {
    return ResourceExhausted("KV pool of " + std::to_string(blocks) +
                             " blocks: its size overflows");
  }
  // Pages are committed as they are first written (MAP_NORESERVE: the size is a bound, not a
  // reservation); both halves start on a 64-byte boundary (block bytes are multiples of 64 at
  // every shape the models have; the mapping itself is page-aligned).
  const size_t half = static_cast<size_t>(*total / 2 + 63) / 64 * 64;
  void* p = mmap(nullptr, 2 * half, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot map a KV pool of " + std::to_string(*total) + " bytes");
  }
  const size_t elements = static_cast<size_t>(*block / 2 / shape.element_bytes());
  return std::shared_ptr<KvPool>(
      new KvPool(shape, block_keys, blocks, elements, static_cast<std::byte*>(p), 2 * half));
}

KvPool::KvPool(const KvShape& shape, int block_keys, int64_t blocks, size_t block_elements,
               std::byte* base, size_t mapped)
    : shape_(shape),
      block_keys_(block_keys),
      blocks_(blocks),
      block_elements_(block_elements),
      base_(base),
      mapped_(mapped),
      k_(base),
      v_(base + mapped / 2) {
  const auto n = static_cast<size_t>(blocks);
  free_.reserve(n);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  refs_.assign(n, 0);
  name_.assign(n, 0);
  stamp_.assign(n, 0);
}

KvPool::~KvPool() { munmap(base_, mapped_); }

int64_t KvPool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_.size() + lru_.size());
}

int64_t KvPool::cached_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(lru_.size());
}

void KvPool::EvictOne() {
  const auto it = lru_.begin();
  const int32_t id = it->second;
  lru_.erase(it);
  const auto b = static_cast<size_t>(id);
  stamp_[b] = 0;
  named_.erase(name_[b]);
  name_[b] = 0;
  free_.push_back(id);
}

bool KvPool::Acquire(int64_t n, std::vector<int32_t>* ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n < 0 || n > static_cast<int64_t>(free_.size() + lru_.size())) return false;
  while (static_cast<int64_t>(free_.size()) < n) EvictOne();
  for (auto it = free_.end() - n; it != free_.end(); ++it) refs_[static_cast<size_t>(*it)] = 1;
  ids->insert(ids->end(), free_.end() - n, free_.end());
  free_.resize(free_.size() - static_cast<size_t>(n));
  return true;
}

void KvPool::Release(std::span<const int32_t> ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const auto b = static_cast<size_t>(*it);
    if (--refs_[b] > 0) continue;
    if (name_[b] != 0) {
      stamp_[b] = ++clock_;
      lru_.emplace(stamp_[b], *it);
    } else {
      free_.push_back(*it);
    }
  }
}

bool KvPool::Name(int32_t id, uint64_t hash) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto b = static_cast<size_t>(id);
  if (hash == 0 || name_[b] != 0) return name_[b] == hash;
  if (!named_.emplace(hash, id).second) return false;
  name_[b] = hash;
  return true;
}

int32_t KvPool::Lookup(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = named_.find(hash);
  return it == named_.end() ? -1 : it->second;
}

bool KvPool::Share(int32_t id, uint64_t hash) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto b = static_cast<size_t>(id);
  if (hash == 0 || name_[b] != hash) return false;
  if (refs_[b]++ == 0) {
    lru_.erase(stamp_[b]);
    stamp_[b] = 0;
  }
  return true;
}

bool KvPool::Named(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return name_[static_cast<size_t>(id)] != 0;
}

}  // namespace vls
