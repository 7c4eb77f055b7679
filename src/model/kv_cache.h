// Per-sequence key/value cache of capacity C, in f32 or BF16, over blocks of a KvPool.
#ifndef VLSTACK_MODEL_KV_CACHE_H_
#define VLSTACK_MODEL_KV_CACHE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/checked_math.h"
#include "base/status.h"
#include "kernels/kernels.h"
#include "model/kv_pool.h"
#include "tensor/dtype.h"

namespace vls {

// K is stored after k_norm and RoPE; V raw. The cache is a table of blocks of a KvPool
// (model/kv_pool.h): position t lives in block t / P (P = block_keys()) at t % P, and within a
// block K and V are each [L, nkv, P, D], head-major, so the keys of one head are one contiguous
// [P, D] stream (attention reads them in order; a row-major [P, nkv, D] layout put consecutive
// keys of a head nkv·D elements apart, a new page per key). Storage is 64-byte aligned.
//
// Two kinds of cache:
//   private: made with the shape (constructor, Create): a pool of its own holding one block of
//            the whole capacity, allocated at once (a standalone session, tests). Its layout is
//            [L, nkv, C, D]: a contiguous cache.
//   pooled:  made on an engine's shared pool: no block until Reserve, blocks of the pool's size
//            (kKvBlockKeys), given back by Shrink and on destruction. No memory is held for
//            positions not yet reserved.
//
// Key tiles (a BF16 cache made with key_tiles, for attention with BF16 products: ADR 0022):
// the keys of a head are stored in tiles of kKeyTile keys, each [D/2, kKeyTile] BF16 pairs:
// pair c (columns 2c, 2c + 1) of key t at uint32 (t / 16)·(D/2)·16 + c·16 + t % 16 (t counted
// from the start of its block), so one 64-byte vector holds one column pair of 16 consecutive
// keys. Blocks hold whole tiles. Values keep the [P, D] layout.
// Thread safety: none; one owner (a session or a batch slot) at a time. The pool is shared.
class KvCache {
 public:
  static constexpr int kKeyTile = 16;
  // Bytes a private cache of this shape holds (K and V), or nullopt when that overflows 64 bits
  // or a dimension is negative.
  static std::optional<uint64_t> Bytes(int layers, int capacity, int kv_heads, int head_dim,
                                       KvDType dtype, bool key_tiles = false) {
    const int64_t dims[] = {2, layers, Padded(capacity, key_tiles), kv_heads, head_dim};
    return CheckedByteCount(dims, KvShape{0, 0, 0, dtype, false}.element_bytes());
  }

  // A private cache, or ResourceExhausted (naming the bytes) when its size overflows or the
  // memory cannot be had. The constructor below throws std::bad_alloc instead.
  // key_tiles: K in key tiles (above) when dtype == kBf16 and head_dim % 32 == 0; ignored
  // otherwise.
  static StatusOr<std::unique_ptr<KvCache>> Create(int layers, int capacity, int kv_heads,
                                                   int head_dim, KvDType dtype = KvDType::kF32,
                                                   bool key_tiles = false);
  KvCache(int layers, int capacity, int kv_heads, int head_dim, KvDType dtype = KvDType::kF32,
          bool key_tiles = false);
  // A pooled cache of up to `capacity` positions; holds no block yet.
  KvCache(std::shared_ptr<KvPool> pool, int capacity);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int capacity() const { return capacity_; }
  int layers() const { return shape_.layers; }
  int kv_heads() const { return shape_.kv_heads; }
  int head_dim() const { return shape_.head_dim; }
  KvDType dtype() const { return shape_.dtype; }
  const KvShape& shape() const { return shape_; }
  // Whether K is stored in key tiles (above, ADR 0022).
  bool key_tiles() const { return shape_.key_tiles; }
  size_t element_bytes() const { return shape_.element_bytes(); }
  static size_t ElementBytes(KvDType t) { return t == KvDType::kF32 ? 4 : 2; }
  // Elements of one position across all heads (nkv·D).
  int64_t row_floats() const { return static_cast<int64_t>(shape_.kv_heads) * shape_.head_dim; }
  // Bytes of the blocks this cache holds.
  size_t bytes() const { return static_cast<size_t>(pool_->block_bytes()) * blocks_.size(); }
  // Positions per block, and the blocks held: positions [0, blocks_held()·block_keys()) may be
  // written.
  int block_keys() const { return pool_->block_keys(); }
  int64_t blocks_held() const { return static_cast<int64_t>(blocks_.size()); }
  const KvPool& pool() const { return *pool_; }
  // Blocks it would hold with positions [0, rows) reserved.
  int64_t BlocksFor(int64_t rows) const { return pool_->BlocksFor(rows); }

  // Holds blocks for positions [0, rows): OutOfRange past the capacity, ResourceExhausted when
  // the pool has too few free blocks (then nothing is taken).
  Status Reserve(int rows);
  // Gives back the blocks past those that cover positions [0, rows) (a private cache keeps its
  // one block).
  void Shrink(int rows);
  // The prefix cache (KvPool): gives back every block, then holds the named blocks `ids` (hashes
  // `hashes`) as its first blocks, shared read-only. False (holding nothing) when the cache is
  // private or a block is no longer named so.
  bool Adopt(std::span<const int32_t> ids, std::span<const uint64_t> hashes);
  // The pool id of block b (b < blocks_held()), and whether it is named (shared: never written).
  int32_t block_id(int64_t b) const { return blocks_[static_cast<size_t>(b)]; }
  bool BlockNamed(int64_t b) const { return pool_->Named(block_id(b)); }

  // The keys and values of head `head` in layer `layer`: position t of the head at element
  // pages[t / page_keys]·page_stride + (t % page_keys)·D of k (and v); in key tiles when
  // key_tiles(). Valid until the next Reserve or Shrink.
  struct HeadView {
    const std::byte* k = nullptr;
    const std::byte* v = nullptr;
    const int32_t* pages = nullptr;
    int64_t page_keys = 0, page_stride = 0;
  };
  HeadView Head(int layer, int head) const;

  // [C, D] keys / values of head `head` in layer `layer` of a private cache; position t at + t·D.
  // REQUIRES: a private cache; dtype() == kF32 (the _bf16 forms: kBf16).
  float* k_head(int layer, int head) { return Single<float>(k_base(), layer, head); }
  float* v_head(int layer, int head) { return Single<float>(v_base(), layer, head); }
  const float* k_head(int layer, int head) const { return Single<float>(k_base(), layer, head); }
  const float* v_head(int layer, int head) const { return Single<float>(v_base(), layer, head); }
  const uint16_t* k_head_bf16(int layer, int head) const {
    return Single<uint16_t>(k_base(), layer, head);
  }
  const uint16_t* v_head_bf16(int layer, int head) const {
    return Single<uint16_t>(v_base(), layer, head);
  }

  // Scatters one position: k[nkv, D], v[nkv, D] into row `index` of every head.
  void WriteRow(int layer, int index, const float* k, const float* v) {
    const int64_t D = shape_.head_dim;
    for (int h = 0; h < shape_.kv_heads; ++h) WriteHead(layer, h, index, k + h * D, v + h * D);
  }
  // Writes position `index` of one head: k[D] and v[D] (either may be null). Calls for
  // different (head, index) pairs may run concurrently. Throws std::out_of_range when no block
  // holds `index` (Reserve first).
  void WriteHead(int layer, int head, int index, const float* k, const float* v);
  // Gathers rows [begin, begin + count) of one layer into k[count, nkv, D] and v[count, nkv, D]
  // (either may be null), widened to f32.
  void ReadRows(int layer, int begin, int count, float* k, float* v) const;
  // Copies rows [0, rows) of every layer and head from `src` (a cache of the same shape and
  // block size), reserving them here first; this cache's other rows keep what they held, except
  // that the rest of the last key tile is src's. False (nothing copied) when the shapes or block
  // sizes differ, rows is out of range or the pool has too few free blocks.
  bool CopyPrefixFrom(const KvCache& src, int rows);
  // Elements [from, from + n) of one head's [C, D] stream, widened to f32 into out[n].
  void ReadHead(bool values, int layer, int head, int64_t from, int64_t n, float* out) const;

 private:
  static int Padded(int capacity, bool key_tiles) {
    return key_tiles && capacity > 0 ? (capacity + kKeyTile - 1) / kKeyTile * kKeyTile : capacity;
  }
  std::byte* k_base() const { return pool_->k_data(); }
  std::byte* v_base() const { return pool_->v_data(); }
  // Element offset of position t of (layer, head) within its block's run, and of the block.
  int64_t HeadOffset(int layer, int head) const {
    return (static_cast<int64_t>(layer) * shape_.kv_heads + head) * pool_->block_keys() *
           shape_.head_dim;
  }
  int64_t BlockOffset(int64_t t) const {
    return static_cast<int64_t>(blocks_[static_cast<size_t>(t / pool_->block_keys())]) *
           pool_->block_elements();
  }
  template <typename T>
  T* Single(std::byte* base, int layer, int head) const {
    return reinterpret_cast<T*>(base) + BlockOffset(0) + HeadOffset(layer, head);
  }
  // Element (t, d) of a key-tiled block run (t within the block), in uint16 units.
  int64_t KeyTileOffset(int64_t t, int64_t d) const {
    const int64_t pairs = shape_.head_dim / 2;
    return 2 * ((t / kKeyTile) * pairs * kKeyTile + (d / 2) * kKeyTile + t % kKeyTile) + d % 2;
  }
  // Element (t, d) of a head: f32 out of K (keys) or V.
  float Element(bool values, int layer, int head, int64_t t, int64_t d) const;

  std::shared_ptr<KvPool> pool_;
  KvShape shape_;
  int capacity_;
  bool private_ = false;  // the pool is this cache's own (one block, never shrunk)
  std::vector<int32_t> blocks_;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_KV_CACHE_H_
