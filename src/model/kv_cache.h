// Per-sequence key/value cache with static capacity C, in f32 or BF16.
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
#include <string>

#include "base/checked_math.h"
#include "base/status.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

namespace vls {

// Element type of a cache: f32, or BF16 (round to nearest even on write, exact widening on read)
// to halve the bytes attention streams per step.
enum class KvDType { kF32, kBf16 };

// K is stored after k_norm and RoPE; V raw. Layout [L, nkv, C, D] for each of K and V:
// head-major, so the keys of one head are one contiguous [C, D] stream (attention reads them in
// order; a row-major [C, nkv, D] layout put consecutive keys of a head nkv·D elements apart, a
// new page per key). Storage is 64-byte aligned and zero-initialised.
//
// Key tiles (a BF16 cache made with key_tiles, for attention with BF16 products: ADR 0022):
// the keys of a head are stored in tiles of kKeyTile keys, each [D/2, kKeyTile] BF16 pairs:
// pair c (columns 2c, 2c + 1) of key t at uint32 (t / 16)·(D/2)·16 + c·16 + t % 16, so one
// 64-byte vector holds one column pair of 16 consecutive keys. C is padded to a whole tile.
// Values keep the [C, D] layout.
// Thread safety: none; one owner (a session or a batch slot) at a time.
class KvCache {
 public:
  // Bytes a cache of this shape holds (K and V), or nullopt when that overflows 64 bits or a
  // dimension is negative.
  static std::optional<uint64_t> Bytes(int layers, int capacity, int kv_heads, int head_dim,
                                       KvDType dtype, bool key_tiles = false) {
    const int64_t dims[] = {2, layers, Padded(capacity, key_tiles), kv_heads, head_dim};
    return CheckedByteCount(dims, ElementBytes(dtype));
  }
  static constexpr int kKeyTile = 16;

  // A zeroed cache, or ResourceExhausted (naming the bytes) when its size overflows or the
  // memory cannot be had. The constructor below throws std::bad_alloc instead.
  // key_tiles: K in key tiles (above) when dtype == kBf16 and head_dim % 32 == 0; ignored
  // otherwise.
  static StatusOr<std::unique_ptr<KvCache>> Create(int layers, int capacity, int kv_heads,
                                                   int head_dim, KvDType dtype = KvDType::kF32,
                                                   bool key_tiles = false) {
    const std::optional<uint64_t> bytes =
        Bytes(layers, capacity, kv_heads, head_dim, dtype, key_tiles);
    if (!bytes || *bytes > SIZE_MAX / 2) {
      return ResourceExhausted("KV cache of capacity " + std::to_string(capacity) +
                               ": its size overflows");
    }
    try {
      return std::make_unique<KvCache>(layers, capacity, kv_heads, head_dim, dtype, key_tiles);
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("cannot allocate a KV cache of capacity " +
                               std::to_string(capacity) + " (" + std::to_string(*bytes) +
                               " bytes): out of memory");
    }
  }

  KvCache(int layers, int capacity, int kv_heads, int head_dim, KvDType dtype = KvDType::kF32,
          bool key_tiles = false)
      : layers_(layers),
        capacity_(capacity),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        dtype_(dtype),
        key_tiles_(key_tiles && dtype == KvDType::kBf16 && head_dim % 32 == 0),
        stride_(Padded(capacity, key_tiles_)),
        elements_(Elements(layers, capacity, kv_heads, head_dim, dtype, key_tiles_)),
        k_(Allocate(elements_ * element_bytes())),
        v_(Allocate(elements_ * element_bytes())) {}

  int capacity() const { return capacity_; }
  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  KvDType dtype() const { return dtype_; }
  // Whether K is stored in key tiles (above, ADR 0022).
  bool key_tiles() const { return key_tiles_; }
  size_t element_bytes() const { return ElementBytes(dtype_); }
  static size_t ElementBytes(KvDType t) { return t == KvDType::kF32 ? 4 : 2; }
  // Elements of one position across all heads (nkv·D).
  int64_t row_floats() const { return static_cast<int64_t>(kv_heads_) * head_dim_; }
  size_t bytes() const { return 2 * elements_ * element_bytes(); }

  // [C, D] keys / values of head `head` in layer `layer`; position t at + t·D.
  // REQUIRES: dtype() == kF32.
  float* k_head(int layer, int head) { return Head<float>(k_.get(), layer, head); }
  float* v_head(int layer, int head) { return Head<float>(v_.get(), layer, head); }
  const float* k_head(int layer, int head) const { return Head<float>(k_.get(), layer, head); }
  const float* v_head(int layer, int head) const { return Head<float>(v_.get(), layer, head); }
  // The same for a BF16 cache (K in key tiles when key_tiles()). REQUIRES: dtype() == kBf16.
  const uint16_t* k_head_bf16(int layer, int head) const {
    return Head<uint16_t>(k_.get(), layer, head);
  }
  const uint16_t* v_head_bf16(int layer, int head) const {
    return Head<uint16_t>(v_.get(), layer, head);
  }

  // Scatters one position: k[nkv, D], v[nkv, D] into row `index` of every head.
  void WriteRow(int layer, int index, const float* k, const float* v) {
    const int64_t D = head_dim_;
    for (int h = 0; h < kv_heads_; ++h) WriteHead(layer, h, index, k + h * D, v + h * D);
  }
  // Writes position `index` of one head: k[D] and v[D] (either may be null). Calls for
  // different (head, index) pairs may run concurrently.
  void WriteHead(int layer, int head, int index, const float* k, const float* v) {
    const int64_t at = static_cast<int64_t>(index) * head_dim_;
    if (k != nullptr && key_tiles_) {
      StoreKeyTiles(layer, head, index, k);
    } else if (k != nullptr) {
      Store(k_.get(), layer, head, at, k);
    }
    if (v != nullptr) Store(v_.get(), layer, head, at, v);
  }
  // Gathers rows [begin, begin + count) of one layer into k[count, nkv, D] and v[count, nkv, D]
  // (either may be null), widened to f32.
  void ReadRows(int layer, int begin, int count, float* k, float* v) const {
    const int64_t D = head_dim_;
    for (int t = 0; t < count; ++t) {
      for (int h = 0; h < kv_heads_; ++h) {
        const int64_t src = static_cast<int64_t>(begin + t) * D;
        const int64_t dst = (static_cast<int64_t>(t) * kv_heads_ + h) * D;
        if (k != nullptr) WidenKeys(layer, h, src, D, k + dst);
        if (v != nullptr) Widen(v_.get(), layer, h, src, D, v + dst);
      }
    }
  }
  // Copies rows [0, rows) of every layer and head from `src` (a cache of the same shape, type
  // and layout); this cache's other rows keep what they held, except that the rest of the last
  // key tile is src's. False (nothing copied) when the shapes differ or rows is out of range.
  bool CopyPrefixFrom(const KvCache& src, int rows) {
    if (src.layers_ != layers_ || src.kv_heads_ != kv_heads_ || src.head_dim_ != head_dim_ ||
        src.dtype_ != dtype_ || src.key_tiles_ != key_tiles_ || rows < 0 ||
        rows > std::min(capacity_, src.capacity_)) {
      return false;
    }
    const size_t eb = element_bytes(), D = static_cast<size_t>(head_dim_);
    const size_t keys = static_cast<size_t>(key_tiles_ ? Padded(rows, true) : rows);
    for (int l = 0; l < layers_; ++l) {
      for (int h = 0; h < kv_heads_; ++h) {
        const size_t dst = HeadOffset(l, h) * eb, from = src.HeadOffset(l, h) * eb;
        std::memcpy(k_.get() + dst, src.k_.get() + from, keys * D * eb);
        std::memcpy(v_.get() + dst, src.v_.get() + from, static_cast<size_t>(rows) * D * eb);
      }
    }
    return true;
  }

  // Elements [from, from + n) of one head, widened to f32 into out[n].
  void ReadHead(bool values, int layer, int head, int64_t from, int64_t n, float* out) const {
    if (values) {
      Widen(v_.get(), layer, head, from, n, out);
    } else {
      WidenKeys(layer, head, from, n, out);
    }
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<std::byte[], Free>;
  // layers·capacity·kv_heads·head_dim; throws std::bad_alloc when the cache's bytes overflow.
  static int Padded(int capacity, bool key_tiles) {
    return key_tiles && capacity > 0 ? (capacity + kKeyTile - 1) / kKeyTile * kKeyTile : capacity;
  }
  static size_t Elements(int layers, int capacity, int kv_heads, int head_dim, KvDType dtype,
                         bool key_tiles) {
    const std::optional<uint64_t> bytes =
        Bytes(layers, capacity, kv_heads, head_dim, dtype, key_tiles);
    if (!bytes || *bytes > SIZE_MAX / 2) throw std::bad_alloc();
    return static_cast<size_t>(*bytes / 2 / ElementBytes(dtype));
  }
  static Buffer Allocate(size_t n) {
    if (n > SIZE_MAX - 64) throw std::bad_alloc();
    const size_t bytes = std::max<size_t>(64, (n + 63) / 64 * 64);
    auto* p = static_cast<std::byte*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return Buffer(p);
  }

  size_t HeadOffset(int layer, int head) const {
    return (static_cast<size_t>(layer) * static_cast<size_t>(kv_heads_) +
            static_cast<size_t>(head)) *
           static_cast<size_t>(stride_) * static_cast<size_t>(head_dim_);
  }
  template <typename T>
  T* Head(std::byte* base, int layer, int head) const {
    return reinterpret_cast<T*>(base) + HeadOffset(layer, head);
  }
  template <typename T>
  const T* Head(const std::byte* base, int layer, int head) const {
    return reinterpret_cast<const T*>(base) + HeadOffset(layer, head);
  }
  void Store(std::byte* base, int layer, int head, int64_t at, const float* src) {
    if (dtype_ == KvDType::kF32) {
      std::copy_n(src, head_dim_, Head<float>(base, layer, head) + at);
    } else {
      kernels::ToBf16(src, head_dim_, Head<uint16_t>(base, layer, head) + at);
    }
  }
  // Element (t, d) of a key-tiled head, in uint16 units.
  int64_t KeyTileOffset(int64_t t, int64_t d) const {
    const int64_t pairs = head_dim_ / 2;
    return 2 * ((t / kKeyTile) * pairs * kKeyTile + (d / 2) * kKeyTile + t % kKeyTile) + d % 2;
  }
  void StoreKeyTiles(int layer, int head, int index, const float* src) {
    uint16_t* base = Head<uint16_t>(k_.get(), layer, head);
    uint16_t chunk[32];
    for (int64_t d0 = 0; d0 < head_dim_; d0 += 32) {
      const int64_t n = std::min<int64_t>(32, head_dim_ - d0);
      kernels::ToBf16(src + d0, n, chunk);
      for (int64_t d = 0; d < n; ++d) base[KeyTileOffset(index, d0 + d)] = chunk[d];
    }
  }
  void WidenKeys(int layer, int head, int64_t from, int64_t n, float* out) const {
    if (!key_tiles_) {
      Widen(k_.get(), layer, head, from, n, out);
      return;
    }
    const uint16_t* base = Head<uint16_t>(k_.get(), layer, head);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t e = from + i;
      out[i] = Bf16ToF32(base[KeyTileOffset(e / head_dim_, e % head_dim_)]);
    }
  }
  void Widen(const std::byte* base, int layer, int head, int64_t from, int64_t n,
             float* out) const {
    if (dtype_ == KvDType::kF32) {
      std::copy_n(Head<float>(base, layer, head) + from, n, out);
    } else {
      const uint16_t* src = Head<uint16_t>(base, layer, head) + from;
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToF32(src[i]);
    }
  }

  int layers_, capacity_, kv_heads_, head_dim_;
  KvDType dtype_;
  bool key_tiles_;
  int stride_;  // keys per head: capacity, padded to whole key tiles
  size_t elements_;
  Buffer k_, v_;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_KV_CACHE_H_
