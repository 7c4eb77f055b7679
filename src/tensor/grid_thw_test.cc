#include "tensor/grid_thw.h"

#include <gtest/gtest.h>

#include <vector>

namespace vls {
namespace {

TEST(GridThwTest, CountsTokensAfterTheSpatialMerge) {
  EXPECT_TRUE(ValidateGridThw({1, 4, 6}, 2, "g").ok());
  EXPECT_EQ(MergedTokens({1, 4, 6}, 2), 6);
  EXPECT_EQ(MergedTokens({2, 4, 4}, 2), 8);
  EXPECT_EQ(MergedTokens({3, 5, 7}, 1), 105);
  // The largest grid still counts exactly in 64 bits.
  const GridThw big{kMaxGridSide, kMaxGridSide, kMaxGridSide};
  ASSERT_TRUE(ValidateGridThw(big, 2, "g").ok());
  EXPECT_EQ(MergedTokens(big, 2), int64_t{1} << 43);
}

TEST(GridThwTest, RefusesEmptyOddAndHugeGridsByName) {
  const GridThw bad[] = {{0, 4, 4},
                         {1, 0, 4},
                         {1, 4, -2},
                         {1, 3, 4},
                         {1, 4, 5},
                         {kMaxGridSide + 1, 2, 2},
                         {1, 2, kMaxGridSide + 2}};
  for (const GridThw& g : bad) {
    Status s = ValidateGridThw(g, 2, "image_grid_thw[3]");
    ASSERT_FALSE(s.ok()) << GridToString(g);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("image_grid_thw[3] = " + GridToString(g)), std::string::npos)
        << s.message();
  }
  // A product divisible by merge^2 is not enough: h and w each have to be.
  EXPECT_FALSE(ValidateGridThw({4, 1, 4}, 2, "g").ok());
  EXPECT_FALSE(ValidateGridThw({1, 2, 2}, 0, "g").ok());
}

TEST(GridThwTest, ListTotalIsCheckedAgainstTheBoundBeforeExpansion) {
  const GridThw ok[] = {{1, 4, 4}, {2, 2, 2}};
  auto total = ValidateGridList(ok, 2, "image_grid_thw", 6);
  ASSERT_TRUE(total.ok()) << total.status().ToString();
  EXPECT_EQ(*total, 6);
  EXPECT_FALSE(ValidateGridList(ok, 2, "image_grid_thw", 5).ok());
  EXPECT_EQ(*ValidateGridList({}, 2, "image_grid_thw", 0), 0);

  // A huge t (a video of 32768 temporal groups, 2^43 tokens each at most) is refused by its
  // count, naming the grid, without expanding it.
  const GridThw huge[] = {{1, 2, 2}, {kMaxGridSide, kMaxGridSide, kMaxGridSide}};
  Status s = ValidateGridList(huge, 2, "video_grid_thw", 100).status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("video_grid_thw[1]"), std::string::npos) << s.message();

  // Many largest grids (2^43 tokens each): refused at the first that passes the bound.
  std::vector<GridThw> many(3000, GridThw{kMaxGridSide, kMaxGridSide, kMaxGridSide});
  s = ValidateGridList(many, 2, "g", int64_t{1} << 50).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("g[128]"), std::string::npos) << s.message();

  // More grids than tokens fit: refused by the count alone.
  std::vector<GridThw> rows(10, GridThw{1, 2, 2});
  s = ValidateGridList(rows, 2, "image_grid_thw", 9).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("10 grids"), std::string::npos) << s.message();
  // A bad grid inside the list names its index.
  rows[3] = {1, 3, 2};
  s = ValidateGridList(rows, 2, "image_grid_thw", 100).status();
  EXPECT_NE(s.message().find("image_grid_thw[3]"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vls
