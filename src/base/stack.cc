#include "base/stack.h"

#include <pthread.h>

namespace vls {

StackGuard::StackGuard() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* addr = nullptr;
  size_t size = 0;
  size_t guard = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size > 0) {
    // The guard page(s) sit at the low end, inside [addr, addr + size) for threads glibc made.
    if (pthread_attr_getguardsize(&attr, &guard) != 0 || guard >= size) guard = 0;
    low_ = reinterpret_cast<uintptr_t>(addr) + guard;
  }
  pthread_attr_destroy(&attr);
}

size_t StackGuard::BytesLeft() const {
  if (low_ == 0) return SIZE_MAX;
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return here > low_ ? here - low_ : 0;
}

}  // namespace vls
