// Host tensors: an owning HostTensor and a non-owning TensorView (row-major, contiguous).
#ifndef VLSTACK_TENSOR_TENSOR_H_
#define VLSTACK_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace vls {

using Shape = std::vector<int64_t>;

std::string ShapeToString(std::span<const int64_t> shape);  // "[2,3]"
// Element count; REQUIRES: dims are non-negative and the product fits (checked by callers).
int64_t NumElements(std::span<const int64_t> shape);

// A view of bytes someone else owns (a mapped file, a HostTensor).
struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const { return NumElements(shape); }
  // REQUIRES: dtype matches.
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(data); }
  const uint16_t* u16() const { return reinterpret_cast<const uint16_t*>(data); }
};

// Owns its bytes. Storage is 64-byte aligned so SIMD kernels can use aligned loads later.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);  // zero-filled

  static HostTensor FromF32(Shape shape, std::span<const float> values);
  static HostTensor FromI32(Shape shape, std::span<const int32_t> values);
  // Copies a view (any dtype) into an owned tensor of the same dtype.
  static HostTensor Copy(const TensorView& view);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return nbytes_; }
  std::byte* data() { return storage_.data(); }
  const std::byte* data() const { return storage_.data(); }
  float* f32() { return reinterpret_cast<float*>(storage_.data()); }
  const float* f32() const { return reinterpret_cast<const float*>(storage_.data()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(storage_.data()); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(storage_.data()); }
  TensorView view() const { return {dtype_, shape_, storage_.data(), nbytes_}; }

 private:
  struct alignas(64) Block {
    std::byte b[64];
  };
  // Aligned byte storage built from 64-byte blocks.
  class Storage {
   public:
    void resize(size_t n) { blocks_.assign((n + 63) / 64, Block{}); }
    std::byte* data() { return blocks_.empty() ? nullptr : blocks_.data()->b; }
    const std::byte* data() const { return blocks_.empty() ? nullptr : blocks_.data()->b; }

   private:
    std::vector<Block> blocks_;
  };

  DType dtype_ = DType::kF32;
  Shape shape_;
  size_t nbytes_ = 0;
  Storage storage_;
};

// Converts any float dtype view to f32 values (F8_E4M3: each element's own value, no block
// scale applied). REQUIRES: view dtype is F32, BF16, F16 or F8_E4M3.
std::vector<float> ToF32Vector(const TensorView& view);
// Converts f32 values to bf16/f16/f32/f8_e4m3 bytes of `dtype`.
HostTensor FromF32As(DType dtype, Shape shape, std::span<const float> values);

}  // namespace vls

#endif  // VLSTACK_TENSOR_TENSOR_H_
