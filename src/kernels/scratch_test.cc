// Scratch arenas: buffers that grow and are kept, and a Context whose products keep their
// converted activations there, called from several threads at once.
#include "kernels/scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/bf16_blocked.h"
#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "kernels/quant.h"

namespace vls::kernels {
namespace {

using testing::Random;

TEST(ScratchTest, BufferGrowsZeroedAlignedAndKeepsItsMemory) {
  ScratchBuffer b;
  EXPECT_EQ(b.bytes(), 0u);
  auto* p = b.Reserve<uint8_t>(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_GE(b.bytes(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p[i], 0) << i;
  p[7] = 42;
  // Smaller or equal requests reuse the buffer as it is.
  EXPECT_EQ(b.Reserve<uint8_t>(50), p);
  EXPECT_EQ(p[7], 42);
  const size_t held = b.bytes();
  EXPECT_EQ(b.Reserve<uint8_t>(held), p);
  EXPECT_EQ(b.bytes(), held);
  // Growing gives a zeroed buffer.
  auto* q = b.Reserve<float>(10000);
  EXPECT_GE(b.bytes(), 40000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(q[i], 0.0f) << i;
}

TEST(ScratchTest, ArenaCountsEveryBuffer) {
  ScratchArena a;
  EXPECT_EQ(a.bytes(), 0u);
  a.layer.Reserve(1000);
  a.rope.Reserve(100);
  const size_t before = a.bytes();
  EXPECT_GE(before, 1100u);
  a.Q8(4, 300);
  EXPECT_GE(a.bytes(), before + 4 * 300 + 4 * 3 * sizeof(float));
}

// A [N, K] weight matrix in each prepared format a Context multiplies.
struct Weights {
  Weights(int64_t N, int64_t K) : f32(Random(size_t(N * K), 5)) {
    for (float& v : f32) v *= 0.05f;
    const Matrix dense{DType::kF32, f32.data(), N, K};
    const Q8Layout l = Q8LayoutFor(N, K);
    q8_buf = std::aligned_alloc(64, size_t(l.bytes));
    QuantizeQ8(dense, 0, N, q8_buf);
    q8 = Q8MatrixAt(q8_buf, N, K);
    blocked_buf.assign(size_t(Bf16BlockedBytes(N, K) / 2), 0);
    PackBf16Blocked(dense, 0, N, blocked_buf.data(), N, 0);
    blocked = Bf16BlockedMatrixAt(blocked_buf.data(), N, K);
  }
  ~Weights() { std::free(q8_buf); }
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;

  std::vector<float> f32;
  void* q8_buf;
  Matrix q8;
  std::vector<uint16_t> blocked_buf;
  Matrix blocked;
};

TEST(ScratchTest, ConcurrentCallersOfOneContextEachGetTheirOwnProduct) {
  // Three threads multiply different activations (decode rows, and prefill rows that take the
  // oneDNN path where the build has it) through one Context at the same time; each must get
  // exactly what it gets alone. Their converted activations live in the callers' arena.
  constexpr int64_t K = 320, N = 200;
  const Weights w(N, K);
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : {Precision::kBF16, Precision::kInt8}) {
      const Matrix& m = p == Precision::kInt8 ? w.q8 : w.blocked;
      Context ctx(3, p, v);
      const int64_t rows[] = {1, 8, kOneDnnMinRows + 9};
      std::vector<std::vector<float>> x, want;
      for (int c = 0; c < 3; ++c) {
        x.push_back(Random(size_t(rows[c] * K), 10 + c));
        want.emplace_back(size_t(rows[c] * N));
        ctx.MatMul(x[c].data(), rows[c], K, m, want[c].data());
      }
      const size_t warm = ctx.ScratchBytes(), warm_x = ctx.scratch(0).matmul_x.bytes();
      EXPECT_GT(warm, 0u) << v->name;
      std::vector<int> mismatches(3, 0);
      std::vector<std::thread> callers;
      for (int c = 0; c < 3; ++c) {
        callers.emplace_back([&, c] {
          std::vector<float> y(size_t(rows[c] * N));
          for (int r = 0; r < 30; ++r) {
            ctx.MatMul(x[c].data(), rows[c], K, m, y.data());
            if (y != want[c]) ++mismatches[size_t(c)];
          }
        });
      }
      for (std::thread& t : callers) t.join();
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(mismatches[size_t(c)], 0)
            << v->name << " " << PrecisionName(p) << " M=" << rows[c];
      }
      // Warmed up: the same shapes again allocate nothing more for the activations (oneDNN's
      // scratchpads may still grow in a worker's arena that ran no block before).
      EXPECT_EQ(ctx.scratch(0).matmul_x.bytes(), warm_x) << v->name << " " << PrecisionName(p);
      if (p == Precision::kInt8) {
        EXPECT_EQ(ctx.ScratchBytes(), warm) << v->name;
      }
    }
  }
}

}  // namespace
}  // namespace vls::kernels
