#include "tensor/grid_thw.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace vls
