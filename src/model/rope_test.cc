// Rope's per-thread cos/sin cache returns exactly what CosSin computes, per table: two tables
// with different parameters never see each other's entries, and colliding coordinates (more
// than the cache holds) are recomputed rather than reused.
#include "model/rope.h"

#include <gtest/gtest.h>

#include <vector>

namespace vls {
namespace {

Qwen3Config Config(double theta) {
  Qwen3Config c;
  c.head_dim = 16;
  c.rope_theta = theta;
  c.position_mode = PositionMode::kMrope;
  c.mrope_section = {4, 2, 2};
  c.mrope_layout = MropeLayout::kInterleaved;
  return c;
}

void ExpectCachedEqualsComputed(const Rope& rope, const RopeCoord& c,
                                kernels::ScratchBuffer& cache) {
  const int half = rope.half();
  std::vector<float> cos(static_cast<size_t>(half)), sin(cos.size());
  rope.CosSin(c, cos.data(), sin.data());
  const float* cs = rope.CachedCosSin(c, cache);
  for (int j = 0; j < half; ++j) {
    ASSERT_EQ(cs[j], cos[static_cast<size_t>(j)]) << c[0] << "," << c[1] << "," << c[2];
    ASSERT_EQ(cs[half + j], sin[static_cast<size_t>(j)]) << c[0] << "," << c[1] << "," << c[2];
  }
}

TEST(RopeTest, CachedCosSinIsCosSinPerTableAndCoordinate) {
  const Rope a(Config(10000.0)), b(Config(5000000.0));
  kernels::ScratchBuffer shared, own;        // a cache both tables use, and one of a's own
  for (int round = 0; round < 2; ++round) {  // the second round hits (or re-fills) the cache
    for (int t = 0; t < 300; t += 7) {
      for (const RopeCoord& c : {RopeCoord{t, t, t}, RopeCoord{t, 3, 5}, RopeCoord{-t, 2, t / 2}}) {
        ExpectCachedEqualsComputed(a, c, shared);
        ExpectCachedEqualsComputed(b, c, shared);
        ExpectCachedEqualsComputed(a, c, own);
      }
    }
  }
  // The same coordinate in two tables gives each table's own values.
  const float a_sin = a.CachedCosSin({100, 100, 100}, shared)[a.half() + 1];
  const float b_sin = b.CachedCosSin({100, 100, 100}, shared)[b.half() + 1];
  EXPECT_NE(a_sin, b_sin);
}

}  // namespace
}  // namespace vls
