// A pool of fixed-size KV blocks shared by the sequences of one engine (paged KV memory,
// docs/contracts.md §4, ADR 0029).
//
// A block holds the K and V of `block_keys` consecutive positions of one sequence for every
// layer and KV head. Within a block, K is [L, nkv, P, D] (P = block_keys): the keys of one head
// are one contiguous [P, D] stream, as in a contiguous cache (in key tiles of 16 keys when the
// shape has them, model/kv_cache.h), so the attention kernels read a block exactly as they read
// a run of a contiguous cache. V is laid out the same in its own array. A sequence's cache
// (KvCache) is a table of block ids.
//
// The storage is one anonymous mapping, committed by the kernel page by page as blocks are
// first written: memory is used for the positions written, not for the pool's size. Released
// blocks keep their bytes (finite values of an earlier sequence, or zeros); nothing reads a
// position before writing it, and the kernels multiply the positions past a row's last key by a
// weight of exactly 0.
//
// Prefix cache (issue 33 item 2): a full block can be named by a hash of its content chained
// from the blocks before it (the engine's: token ids or embedding bytes, positions, DeepStack
// features). Any sequence whose prompt starts with the same content then shares it read-only
// (Share: a reference more) instead of computing it. A named block that no sequence references
// stays cached, and Acquire evicts such blocks, least recently released first, when the free
// list is short. Nothing writes into a named block: only full, committed blocks are named.
//
// Thread safety: every method may be called from any thread. Reading and writing a block is its
// holders' business.
#ifndef VLSTACK_MODEL_KV_POOL_H_
#define VLSTACK_MODEL_KV_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace vls {

// Element type of a cache: f32, or BF16 (round to nearest even on write, exact widening on read)
// to halve the bytes attention streams per step.
enum class KvDType { kF32, kBf16 };

// What one position of a cache holds.
struct KvShape {
  int layers = 0, kv_heads = 0, head_dim = 0;
  KvDType dtype = KvDType::kF32;
  bool key_tiles = false;  // K in key tiles (BF16, head_dim % 32 == 0; model/kv_cache.h)

  size_t element_bytes() const { return dtype == KvDType::kF32 ? 4 : 2; }
  bool operator==(const KvShape&) const = default;
};

// Positions per block of an engine's pool. A multiple of the attention kernels' key block (64
// keys), so that every key block the kernels score lies in one pool block: a paged cache is read
// in exactly the blocks, and rounds exactly as, a contiguous one (ADR 0029 has the measurements
// of 64, 128 and 256).
inline constexpr int kKvBlockKeys = 64;
// The block sizes a load accepts (LoadOptions::kv_block_keys).
inline constexpr int kKvBlockKeyChoices[] = {64, 128, 256};

class KvPool {
 public:
  // Bytes of one block (K and V), or nullopt when that overflows.
  static std::optional<uint64_t> BlockBytes(const KvShape& shape, int block_keys);
  // A pool of `blocks` blocks. InvalidArgument for a bad shape or block size (block_keys > 0, a
  // multiple of 16 with key tiles); ResourceExhausted when the mapping cannot be had.
  static StatusOr<std::shared_ptr<KvPool>> Create(const KvShape& shape, int block_keys,
                                                  int64_t blocks);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvShape& shape() const { return shape_; }
  int block_keys() const { return block_keys_; }
  int64_t blocks() const { return blocks_; }
  uint64_t block_bytes() const { return 2 * block_elements_ * shape_.element_bytes(); }
  uint64_t bytes() const { return block_bytes() * static_cast<uint64_t>(blocks_); }
  // Elements of one block of K (or of V): layers·nkv·block_keys·D.
  int64_t block_elements() const { return static_cast<int64_t>(block_elements_); }
  // Blocks Acquire can take: the free ones and the cached ones no sequence references.
  int64_t free_blocks() const VLS_EXCLUDES(mu_);
  // Named blocks no sequence references (kept for the prefix cache, evictable).
  int64_t cached_blocks() const VLS_EXCLUDES(mu_);
  // Blocks that cover `rows` positions.
  int64_t BlocksFor(int64_t rows) const { return (rows + block_keys_ - 1) / block_keys_; }

  // Takes `n` blocks (all or none; evicting unreferenced cached blocks, least recently released
  // first, when the free list is short) and appends their ids to `ids`; false when fewer are
  // available.
  bool Acquire(int64_t n, std::vector<int32_t>* ids) VLS_EXCLUDES(mu_);
  // Drops one reference to each block (taken by Acquire or Share); a block without references is
  // free again, or cached when it is named.
  void Release(std::span<const int32_t> ids) VLS_EXCLUDES(mu_);

  // The prefix cache. Names block `id` (referenced, full) with `hash` unless the hash already
  // names a block or `id` has a name; returns whether `id` is now named `hash`.
  bool Name(int32_t id, uint64_t hash) VLS_EXCLUDES(mu_);
  // The block named `hash`, or -1.
  int32_t Lookup(uint64_t hash) const VLS_EXCLUDES(mu_);
  // A reference more to a named block (out of the cache's eviction order); false when `id` is
  // not named `hash` (evicted since the lookup).
  bool Share(int32_t id, uint64_t hash) VLS_EXCLUDES(mu_);
  // Whether block `id` has a name (then nothing may write into it).
  bool Named(int32_t id) const VLS_EXCLUDES(mu_);

  std::byte* k_data() const { return k_; }
  std::byte* v_data() const { return v_; }

 private:
  KvPool(const KvShape& shape, int block_keys, int64_t blocks, size_t block_elements,
         std::byte* base, size_t mapped);

  const KvShape shape_;
  const int block_keys_;
  const int64_t blocks_;
  const size_t block_elements_;
  std::byte* const base_;  // the mapping: K of every block, then V of every block
  const size_t mapped_;
  std::byte* const k_;
  std::byte* const v_;
  // Evicts the least recently released cached block onto the free list.
  void EvictOne() VLS_REQUIRES(mu_);

  mutable std::mutex mu_;
  std::vector<int32_t> free_ VLS_GUARDED_BY(mu_);    // a stack: the last released is reused first
  std::vector<int32_t> refs_ VLS_GUARDED_BY(mu_);    // [blocks] references
  std::vector<uint64_t> name_ VLS_GUARDED_BY(mu_);   // [blocks] hash naming it, 0 for none
  std::vector<uint64_t> stamp_ VLS_GUARDED_BY(mu_);  // [blocks] key in lru_, 0 when not cached
  std::unordered_map<uint64_t, int32_t> named_ VLS_GUARDED_BY(mu_);  // hash -> block
  std::map<uint64_t, int32_t> lru_ VLS_GUARDED_BY(mu_);  // release stamp -> cached block
  uint64_t clock_ VLS_GUARDED_BY(mu_) = 0;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_KV_POOL_H_
