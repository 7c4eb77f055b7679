// Overflow-checked integer arithmetic for sizes that come from untrusted input.
#ifndef VLSTACK_BASE_CHECKED_MATH_H_
#define VLSTACK_BASE_CHECKED_MATH_H_

#include <cstdint>
#include <optional>
#include <span>

namespace vls {

// Returns nullopt on overflow.
inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> CheckedAddI64(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of non-negative dims times elem_size; nullopt on overflow or a negative dim.
inline std::optional<uint64_t> CheckedByteCount(std::span<const int64_t> dims, uint64_t elem_size) {
  uint64_t n = elem_size;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    auto m = CheckedMul(n, static_cast<uint64_t>(d));
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

}  // namespace vls

#endif  // VLSTACK_BASE_CHECKED_MATH_H_
