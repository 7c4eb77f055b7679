// The calling thread's stack: how much is left, so that a recursive evaluator of untrusted input
// can stop with an error before it overflows (a thread may have far less stack than the main
// thread's 8 MiB, and a sanitizer build's frames are several times larger than a release build's).
#ifndef VLSTACK_BASE_STACK_H_
#define VLSTACK_BASE_STACK_H_

#include <cstddef>
#include <cstdint>

namespace vls {

// Captures the bounds of the calling thread's stack. Thread safety: use it on the thread that
// created it.
class StackGuard {
 public:
  // Reads the bounds (pthread_getattr_np; for the main thread glibc parses /proc/self/maps, so
  // create one per evaluation, not per step). When they cannot be read, BytesLeft() is SIZE_MAX.
  StackGuard();

  // Bytes between the caller's frame and the end of the stack (the stack grows down).
  size_t BytesLeft() const;

 private:
  uintptr_t low_ = 0;  // lowest usable address; 0 when unknown
};

}  // namespace vls

#endif  // VLSTACK_BASE_STACK_H_
