// kernels/read_bandwidth.h: SumLines equals a plain sum of the 8-byte words whatever the line
// count (vector remainders, pool chunks) and thread count, so the roof measurement reads every
// byte it counts; ReadBandwidth reports a finite positive rate.
#include "kernels/read_bandwidth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

namespace vls::kernels {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

TEST(ReadBandwidthTest, SumLinesSumsEveryWord) {
  constexpr int64_t kMaxLines = 3 * 4096 + 7;  // three pool chunks and a ragged tail
  std::unique_ptr<uint64_t, FreeDeleter> buf(
      static_cast<uint64_t*>(std::aligned_alloc(64, kMaxLines * 64)));
  std::mt19937_64 rng(3);
  for (int64_t i = 0; i < kMaxLines * 8; ++i) buf.get()[i] = rng();
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t lines : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{4096}, kMaxLines}) {
      uint64_t want = 0;
      for (int64_t i = 0; i < lines * 8; ++i) want += buf.get()[i];
      EXPECT_EQ(SumLines(pool, buf.get(), lines), want) << threads << " threads, " << lines;
    }
  }
}

TEST(ReadBandwidthTest, ReportsAPositiveRate) {
  constexpr int64_t kBytes = int64_t{8} << 20;
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(64, kBytes)));
  std::memset(buf.get(), 1, kBytes);
  ThreadPool pool(2);
  const double bw = ReadBandwidth(pool, buf.get(), kBytes, 2);
  EXPECT_TRUE(std::isfinite(bw));
  EXPECT_GT(bw, 0.0);
}

}  // namespace
}  // namespace vls::kernels
