// Per-sequence key/value cache with static capacity C.
#ifndef VLSTACK_MODEL_KV_CACHE_H_
#define VLSTACK_MODEL_KV_CACHE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace vls {

// K is stored after k_norm and RoPE; V raw, both f32. Layout [L, nkv, C, D] for each of K and
// V: head-major, so the keys of one head are one contiguous [C, D] stream (attention reads
// them in order; a row-major [C, nkv, D] layout put consecutive keys of a head nkv·D floats
// apart, a new page per key). Storage is 64-byte aligned and zero-initialised.
// Thread safety: none; one owner (a session or a batch slot) at a time.
class KvCache {
 public:
  KvCache(int layers, int capacity, int kv_heads, int head_dim)
      : layers_(layers),
        capacity_(capacity),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        floats_(static_cast<size_t>(layers) * static_cast<size_t>(capacity) *
                static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim)),
        k_(Allocate(floats_)),
        v_(Allocate(floats_)) {}

  int capacity() const { return capacity_; }
  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  // Floats of one position across all heads (nkv·D).
  int64_t row_floats() const { return static_cast<int64_t>(kv_heads_) * head_dim_; }
  size_t bytes() const { return 2 * floats_ * sizeof(float); }

  // [C, D] keys / values of head `head` in layer `layer`; position t at + t·D.
  float* k_head(int layer, int head) { return k_.get() + HeadOffset(layer, head); }
  float* v_head(int layer, int head) { return v_.get() + HeadOffset(layer, head); }
  const float* k_head(int layer, int head) const { return k_.get() + HeadOffset(layer, head); }
  const float* v_head(int layer, int head) const { return v_.get() + HeadOffset(layer, head); }

  // Scatters one position: k[nkv, D], v[nkv, D] into row `index` of every head.
  void WriteRow(int layer, int index, const float* k, const float* v) {
    const int64_t D = head_dim_;
    for (int h = 0; h < kv_heads_; ++h) {
      std::copy_n(k + h * D, D, k_head(layer, h) + index * D);
      std::copy_n(v + h * D, D, v_head(layer, h) + index * D);
    }
  }
  // Gathers rows [begin, begin + count) of one layer into k[count, nkv, D] and v[count, nkv, D]
  // (either may be null).
  void ReadRows(int layer, int begin, int count, float* k, float* v) const {
    const int64_t D = head_dim_;
    for (int t = 0; t < count; ++t) {
      for (int h = 0; h < kv_heads_; ++h) {
        const int64_t src = static_cast<int64_t>(begin + t) * D;
        const int64_t dst = (static_cast<int64_t>(t) * kv_heads_ + h) * D;
        if (k != nullptr) std::copy_n(k_head(layer, h) + src, D, k + dst);
        if (v != nullptr) std::copy_n(v_head(layer, h) + src, D, v + dst);
      }
    }
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<float[], Free>;
  static Buffer Allocate(size_t n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return Buffer(p);
  }

  size_t HeadOffset(int layer, int head) const {
    return (static_cast<size_t>(layer) * static_cast<size_t>(kv_heads_) +
            static_cast<size_t>(head)) *
           static_cast<size_t>(capacity_) * static_cast<size_t>(head_dim_);
  }
  int layers_, capacity_, kv_heads_, head_dim_;
  size_t floats_;
  Buffer k_, v_;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_KV_CACHE_H_
