#include "base/stack.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <cstdint>
#include <cstring>

namespace vls {
namespace {

// Recurses until fewer than `margin` bytes are left; returns the depth reached. The frame is
// used after the call (the empty asm statements), so the recursion cannot become a loop.
int DescendUntil(const StackGuard& guard, size_t margin, int depth) {
  char frame[1024];
  std::memset(frame, depth & 0x7f, sizeof(frame));
  asm volatile("" : : "r"(frame) : "memory");
  if (guard.BytesLeft() < margin) return depth;
  const int reached = DescendUntil(guard, margin, depth + 1);
  asm volatile("" : : "r"(frame) : "memory");
  return reached;
}

TEST(StackGuardTest, MainThreadHasItsStack) {
  StackGuard guard;
  const size_t left = guard.BytesLeft();
  ASSERT_NE(left, SIZE_MAX) << "the main thread's stack bounds could not be read";
  EXPECT_GT(left, size_t{64} << 10);
  EXPECT_LT(left, size_t{1} << 36);
}

struct ThreadResult {
  size_t left_at_start = 0;
  int depth = 0;
};

void* SmallStackThread(void* arg) {
  auto* result = static_cast<ThreadResult*>(arg);
  StackGuard guard;
  result->left_at_start = guard.BytesLeft();
  result->depth = DescendUntil(guard, size_t{64} << 10, 0);
  return nullptr;
}

// A thread with a 512 KiB stack: the guard sees about that much, and a recursion that stops when
// 64 KiB are left stops there instead of overflowing.
TEST(StackGuardTest, SmallThreadStackIsSeenAndRecursionStopsInTime) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  constexpr size_t kStack = size_t{512} << 10;
  ASSERT_EQ(pthread_attr_setstacksize(&attr, kStack), 0);
  ThreadResult result;
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, SmallStackThread, &result), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_LE(result.left_at_start, kStack);
  EXPECT_GT(result.left_at_start, kStack / 2);
  EXPECT_GT(result.depth, 100);  // about (512 - 64) KiB / (1 KiB + a frame)
}

}  // namespace
}  // namespace vls
