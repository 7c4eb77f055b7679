#include "model/kv_cache.h"

#include <stdexcept>
#include <utility>

namespace vls {

namespace {

KvShape ShapeOf(int layers, int kv_heads, int head_dim, KvDType dtype, bool key_tiles) {
  return {layers, kv_heads, head_dim, dtype,
          key_tiles && dtype == KvDType::kBf16 && head_dim % 32 == 0};
}

// The one-block pool of a private cache, throwing std::bad_alloc when it cannot be had.
std::shared_ptr<KvPool> PrivatePool(const KvShape& shape, int capacity) {
  const int keys = std::max(1, shape.key_tiles ? (capacity + KvCache::kKeyTile - 1) /
                                                     KvCache::kKeyTile * KvCache::kKeyTile
                                               : capacity);
  StatusOr<std::shared_ptr<KvPool>> pool = KvPool::Create(shape, keys, 1);
  if (!pool.ok()) throw std::bad_alloc();
  return std::move(*pool);
}

}  // namespace

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(int layers, int capacity, int kv_heads,
                                                   int head_dim, KvDType dtype, bool key_tiles) {
  const std::optional<uint64_t> bytes =
      Bytes(layers, capacity, kv_heads, head_dim, dtype, key_tiles);
  if (!bytes || *bytes > SIZE_MAX / 2) {
    return ResourceExhausted("KV cache of capacity " + std::to_string(capacity) +
                             ": its size overflows");
  }
  try {
    return std::make_unique<KvCache>(layers, capacity, kv_heads, head_dim, dtype, key_tiles);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("cannot allocate a KV cache of capacity " + std::to_string(capacity) +
                             " (" + std::to_string(*bytes) + " bytes): out of memory");
  }
}

KvCache::KvCache(int layers, int capacity, int kv_heads, int head_dim, KvDType dtype,
                 bool key_tiles)
    : pool_(PrivatePool(ShapeOf(layers, kv_heads, head_dim, dtype, key_tiles), capacity)),
      shape_(pool_->shape()),
      capacity_(capacity),
      private_(true) {
  if (!pool_->Acquire(1, &blocks_)) throw std::bad_alloc();
}

KvCache::KvCache(std::shared_ptr<KvPool> pool, int capacity)
    : pool_(std::move(pool)), shape_(pool_->shape()), capacity_(capacity) {}

KvCache::~KvCache() { pool_->Release(blocks_); }

Status KvCache::Reserve(int rows) {
  if (rows < 0 || rows > capacity_) {
    return OutOfRange("KV cache: " + std::to_string(rows) + " positions past the capacity " +
                      std::to_string(capacity_));
  }
  const int64_t need = BlocksFor(rows) - blocks_held();
  if (need <= 0) return Status::Ok();
  if (!pool_->Acquire(need, &blocks_)) {
    return ResourceExhausted(
        "KV memory: " + std::to_string(rows) + " positions need " + std::to_string(need) +
        " more block(s) of " + std::to_string(block_keys()) + " but the pool has " +
        std::to_string(pool_->free_blocks()) + " of " + std::to_string(pool_->blocks()) + " free");
  }
  return Status::Ok();
}

void KvCache::Shrink(int rows) {
  const auto keep = static_cast<size_t>(std::max<int64_t>(0, BlocksFor(rows)));
  if (private_ || keep >= blocks_.size()) return;
  pool_->Release(std::span<const int32_t>(blocks_).subspan(keep));
  blocks_.resize(keep);
}

bool KvCache::Adopt(std::span<const int32_t> ids, std::span<const uint64_t> hashes) {
  if (private_) return false;
  Shrink(0);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!pool_->Share(ids[i], hashes[i])) {
      Shrink(0);
      return false;
    }
    blocks_.push_back(ids[i]);
  }
  return true;
}

KvCache::HeadView KvCache::Head(int layer, int head) const {
  const int64_t at = HeadOffset(layer, head) * static_cast<int64_t>(element_bytes());
  HeadView h;
  h.k = k_base() + at;
  h.v = v_base() + at;
  h.pages = blocks_.data();
  h.page_keys = pool_->block_keys();
  h.page_stride = pool_->block_elements();
  return h;
}

void KvCache::WriteHead(int layer, int head, int index, const float* k, const float* v) {
  if (index < 0 || static_cast<int64_t>(index) >= blocks_held() * block_keys()) {
    throw std::out_of_range("KV cache: position " + std::to_string(index) +
                            " is in no block this cache holds");
  }
  const int64_t D = shape_.head_dim, P = block_keys();
  const int64_t base = BlockOffset(index) + HeadOffset(layer, head);
  const int64_t t = index % P;
  if (k != nullptr && shape_.key_tiles) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(k_base()) + base;
    uint16_t chunk[32];
    for (int64_t d0 = 0; d0 < D; d0 += 32) {
      const int64_t n = std::min<int64_t>(32, D - d0);
      kernels::ToBf16(k + d0, n, chunk);
      for (int64_t d = 0; d < n; ++d) dst[KeyTileOffset(t, d0 + d)] = chunk[d];
    }
    k = nullptr;
  }
  for (int which = 0; which < 2; ++which) {
    const float* src = which == 0 ? k : v;
    if (src == nullptr) continue;
    std::byte* data = which == 0 ? k_base() : v_base();
    if (shape_.dtype == KvDType::kF32) {
      std::copy_n(src, D, reinterpret_cast<float*>(data) + base + t * D);
    } else {
      kernels::ToBf16(src, D, reinterpret_cast<uint16_t*>(data) + base + t * D);
    }
  }
}

float KvCache::Element(bool values, int layer, int head, int64_t t, int64_t d) const {
  const int64_t D = shape_.head_dim, P = block_keys();
  const int64_t base = BlockOffset(t) + HeadOffset(layer, head);
  const std::byte* data = values ? v_base() : k_base();
  if (shape_.dtype == KvDType::kF32) {
    return reinterpret_cast<const float*>(data)[base + (t % P) * D + d];
  }
  const auto* h = reinterpret_cast<const uint16_t*>(data) + base;
  return Bf16ToF32(!values && shape_.key_tiles ? h[KeyTileOffset(t % P, d)] : h[(t % P) * D + d]);
}

void KvCache::ReadRows(int layer, int begin, int count, float* k, float* v) const {
  const int64_t D = shape_.head_dim, nkv = shape_.kv_heads;
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t h = 0; h < nkv; ++h) {
      const int64_t dst = (t * nkv + h) * D;
      for (int64_t d = 0; d < D; ++d) {
        if (k != nullptr) k[dst + d] = Element(false, layer, static_cast<int>(h), begin + t, d);
        if (v != nullptr) v[dst + d] = Element(true, layer, static_cast<int>(h), begin + t, d);
      }
    }
  }
}

void KvCache::ReadHead(bool values, int layer, int head, int64_t from, int64_t n,
                       float* out) const {
  const int64_t D = shape_.head_dim;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = Element(values, layer, head, (from + i) / D, (from + i) % D);
  }
}

bool KvCache::CopyPrefixFrom(const KvCache& src, int rows) {
  if (!(src.shape_ == shape_) || src.block_keys() != block_keys() || rows < 0 ||
      rows > std::min(capacity_, src.capacity_) || rows > src.blocks_held() * block_keys() ||
      !Reserve(rows).ok()) {
    return false;
  }
  const size_t eb = element_bytes(), D = static_cast<size_t>(shape_.head_dim);
  const int64_t P = block_keys();
  for (int64_t b = 0; b * P < rows; ++b) {
    const int64_t n = std::min<int64_t>(P, rows - b * P);
    const size_t keys =
        static_cast<size_t>(shape_.key_tiles ? Padded(static_cast<int>(n), true) : n);
    const int64_t from = src.BlockOffset(b * P), to = BlockOffset(b * P);
    for (int l = 0; l < shape_.layers; ++l) {
      for (int h = 0; h < shape_.kv_heads; ++h) {
        const size_t off = static_cast<size_t>(HeadOffset(l, h)) * eb;
        const size_t f = static_cast<size_t>(from) * eb + off,
                     t = static_cast<size_t>(to) * eb + off;
        std::memcpy(k_base() + t, src.k_base() + f, keys * D * eb);
        std::memcpy(v_base() + t, src.v_base() + f, static_cast<size_t>(n) * D * eb);
      }
    }
  }
  return true;
}

}  // namespace vls
