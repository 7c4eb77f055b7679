#include "tensor/tensor.h"

#include <cassert>
#include <cstring>

namespace vls {

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t NumElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  nbytes_ = static_cast<size_t>(NumElements(shape_)) * DTypeSize(dtype_);
  storage_.resize(nbytes_);
}

HostTensor HostTensor::FromF32(Shape shape, std::span<const float> values) {
  HostTensor t(DType::kF32, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == t.numel());
  if (!values.empty()) std::memcpy(t.data(), values.data(), t.nbytes());
  return t;
}

HostTensor HostTensor::FromI32(Shape shape, std::span<const int32_t> values) {
  HostTensor t(DType::kI32, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == t.numel());
  if (!values.empty()) std::memcpy(t.data(), values.data(), t.nbytes());
  return t;
}

HostTensor HostTensor::Copy(const TensorView& view) {
  HostTensor t(view.dtype, view.shape);
  assert(t.nbytes() == view.nbytes);
  if (view.nbytes) std::memcpy(t.data(), view.data, view.nbytes);
  return t;
}

std::vector<float> ToF32Vector(const TensorView& view) {
  const auto n = static_cast<size_t>(view.numel());
  std::vector<float> out(n);
  switch (view.dtype) {
    case DType::kF32:
      if (n) std::memcpy(out.data(), view.data, n * 4);
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = Bf16ToF32(view.u16()[i]);
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = F16ToF32(view.u16()[i]);
      break;
    case DType::kF8E4M3:  // the element values, without any block scale
      for (size_t i = 0; i < n; ++i) out[i] = F8E4M3ToF32(static_cast<uint8_t>(view.data[i]));
      break;
    case DType::kI32: assert(false && "ToF32Vector on I32"); break;
  }
  return out;
}

HostTensor FromF32As(DType dtype, Shape shape, std::span<const float> values) {
  HostTensor t(dtype, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == t.numel());
  auto* u16 = reinterpret_cast<uint16_t*>(t.data());
  switch (dtype) {
    case DType::kF32:
      if (!values.empty()) std::memcpy(t.data(), values.data(), t.nbytes());
      break;
    case DType::kBF16:
      for (size_t i = 0; i < values.size(); ++i) u16[i] = F32ToBf16(values[i]);
      break;
    case DType::kF16:
      for (size_t i = 0; i < values.size(); ++i) u16[i] = F32ToF16(values[i]);
      break;
    case DType::kF8E4M3:
      for (size_t i = 0; i < values.size(); ++i) {
        t.data()[i] = static_cast<std::byte>(F32ToF8E4M3(values[i]));
      }
      break;
    case DType::kI32: assert(false && "FromF32As to I32"); break;
  }
  return t;
}

}  // namespace vls
