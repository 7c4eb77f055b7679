// Per-sequence key/value cache with static capacity C.
#ifndef VLSTACK_MODEL_KV_CACHE_H_
#define VLSTACK_MODEL_KV_CACHE_H_

#include <cstdint>
#include <vector>

namespace vls {

// K is stored after k_norm and RoPE; V raw. Layout [L, C, nkv, D] for each of K and V.
// Thread safety: none; one owner (a session or a batch slot) at a time.
class KvCache {
 public:
  KvCache(int layers, int capacity, int kv_heads, int head_dim)
      : layers_(layers),
        capacity_(capacity),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        k_(static_cast<size_t>(layers) * capacity * kv_heads * head_dim),
        v_(k_.size()) {}

  int capacity() const { return capacity_; }
  int layers() const { return layers_; }
  int64_t row_floats() const { return static_cast<int64_t>(kv_heads_) * head_dim_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

  // [nkv, D] row `index` of layer `layer`.
  float* k(int layer, int index) { return k_.data() + Offset(layer, index); }
  float* v(int layer, int index) { return v_.data() + Offset(layer, index); }
  const float* k(int layer, int index) const { return k_.data() + Offset(layer, index); }
  const float* v(int layer, int index) const { return v_.data() + Offset(layer, index); }

 private:
  size_t Offset(int layer, int index) const {
    return (static_cast<size_t>(layer) * capacity_ + static_cast<size_t>(index)) *
           static_cast<size_t>(row_floats());
  }
  int layers_, capacity_, kv_heads_, head_dim_;
  std::vector<float> k_, v_;
};

}  // namespace vls

#endif  // VLSTACK_MODEL_KV_CACHE_H_
