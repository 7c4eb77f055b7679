#include "runtime/positions.h"

#include <gtest/gtest.h>

namespace vls {
namespace {

Qwen3Config VlConfig() {
  Qwen3Config c;
  c.model_type = "qwen3_vl";
  c.position_mode = PositionMode::kMrope;
  c.vision_start_token_id = 100;
  c.vision_end_token_id = 101;
  c.image_token_id = 102;
  c.video_token_id = 103;
  c.spatial_merge_size = 2;
  return c;
}

std::vector<int32_t> Axis(const PositionIds& p, int a) {
  return {p.data.begin() + a * p.length, p.data.begin() + (a + 1) * p.length};
}

// docs/contracts.md §B.4, image example: t0 t1 t2 <vs> IMG×6 <ve> t3 t4 with grid [1,4,6].
TEST(GetRopeIndexTest, WorkedImageExample) {
  const std::vector<int32_t> ids = {1, 2, 3, 100, 102, 102, 102, 102, 102, 102, 101, 4, 5};
  const GridThw grid[] = {{1, 4, 6}};
  auto r = GetRopeIndex(VlConfig(), ids, grid, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Axis(r->positions, 0), (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 7, 8, 9}));
  EXPECT_EQ(Axis(r->positions, 1), (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 7, 8, 9}));
  EXPECT_EQ(Axis(r->positions, 2), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(r->rope_delta, -3);
}

// §B.4 video example: grid [2,4,4] split into two groups with timestamp text between.
TEST(GetRopeIndexTest, WorkedVideoExample) {
  const std::vector<int32_t> ids = {1, 7, 7,   100, 103, 103, 103, 103, 101,
                                    7, 7, 100, 103, 103, 103, 103, 101, 2};
  const GridThw grid[] = {{2, 4, 4}};
  auto r = GetRopeIndex(VlConfig(), ids, {}, grid);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Axis(r->positions, 0),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 4, 4, 6, 7, 8, 9, 10, 10, 10, 10, 12, 13}));
  EXPECT_EQ(Axis(r->positions, 1),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 5, 5, 6, 7, 8, 9, 10, 10, 11, 11, 12, 13}));
  EXPECT_EQ(Axis(r->positions, 2),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 11, 10, 11, 12, 13}));
  EXPECT_EQ(r->rope_delta, -4);
}

TEST(GetRopeIndexTest, TextOnlyIsSequentialWithZeroDelta) {
  const std::vector<int32_t> ids = {5, 6, 7};
  auto r = GetRopeIndex(VlConfig(), ids, {}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Axis(r->positions, 1), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(r->rope_delta, 0);
}

TEST(GetRopeIndexTest, RejectsGridsThatDisagreeWithTheTokens) {
  const std::vector<int32_t> ids = {1, 100, 102, 102, 102, 101};  // 3 pads
  const GridThw grid[] = {{1, 4, 4}};                             // needs 4
  auto r = GetRopeIndex(VlConfig(), ids, grid, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pad tokens"), std::string::npos) << r.status().message();
  auto missing = GetRopeIndex(VlConfig(), ids, {}, {});
  EXPECT_FALSE(missing.ok());
  const GridThw odd[] = {{1, 3, 4}};
  EXPECT_FALSE(GetRopeIndex(VlConfig(), ids, odd, {}).ok());
}

TEST(PositionsTest, ModeComesFromTheModelNotTheRank) {
  const int32_t vals[3] = {0, 1, 2};
  const int64_t one_d[] = {3};
  auto ok = PositionsFromTensor(PositionMode::k1D, one_d, vals, 3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->At(2), (RopeCoord{2, 2, 2}));
  auto wrong = PositionsFromTensor(PositionMode::kMrope, one_d, vals, 3);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("M-RoPE"), std::string::npos);
}

TEST(PositionsTest, DecodeCoordinateIsCheckedPhysicalPlusDelta) {
  EXPECT_EQ(DecodeCoordinate(4, -2).value(), (RopeCoord{2, 2, 2}));
  EXPECT_EQ(DecodeCoordinate(13, -3).value(), (RopeCoord{10, 10, 10}));
  EXPECT_FALSE(DecodeCoordinate(1, -2).ok());
  EXPECT_FALSE(DecodeCoordinate(2147483647, 1).ok());
}

}  // namespace
}  // namespace vls
