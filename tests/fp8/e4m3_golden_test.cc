// The engine's E4M3 decode against the golden table tests/oracle/fp8_oracle.py writes from the
// OCP definition (tests/fp8/e4m3_table.txt; the ctest fp8_oracle_table checks that file against
// the Python formula and the spec's anchor values).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "tensor/dtype.h"

namespace vls {
namespace {

TEST(E4M3GoldenTest, EveryCodeDecodesToTheOraclesBits) {
  std::ifstream in(VLS_E4M3_TABLE);
  ASSERT_TRUE(in.good()) << VLS_E4M3_TABLE;
  std::string line;
  int seen = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string code_text, bits_text;
    fields >> code_text >> bits_text;
    const auto code = static_cast<uint8_t>(std::stoul(code_text, nullptr, 16));
    const auto bits = static_cast<uint32_t>(std::stoul(bits_text, nullptr, 16));
    ASSERT_EQ(code, seen) << line;
    const float want = std::bit_cast<float>(bits);
    const float got = F8E4M3ToF32(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << line;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), bits) << line;  // -0 keeps its sign
      EXPECT_EQ(F32ToF8E4M3(want), code) << line;
    }
    ++seen;
  }
  EXPECT_EQ(seen, 256);
}

}  // namespace
}  // namespace vls
