// The BF16 GEMM probe behind DefaultVariant's choice on AVX512-BF16 CPUs (ADR 0031).
#include "kernels/gemm_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/onednn_matmul.h"

namespace vls::kernels {
namespace {

const KernelVariant* Named(const char* name) {
  for (const KernelVariant* v : SupportedVariants()) {
    if (std::strcmp(v->name, name) == 0) return v;
  }
  return nullptr;
}

TEST(GemmProbeTest, FmaIsChosenOnlyWhenClearlyFasterAtBothShapes) {
  GemmProbe p;
  p.dot_small_us = 100;
  p.dot_large_us = 1000;
  p.fma_small_us = 80;
  p.fma_large_us = 800;
  EXPECT_FALSE(p.FmaFaster()) << "a probe that did not run chooses nothing";
  p.ran = true;
  EXPECT_TRUE(p.FmaFaster());
  p.fma_large_us = 950;  // within the margin at the prefill shape
  EXPECT_FALSE(p.FmaFaster());
  p.fma_large_us = 800;
  p.fma_small_us = 95;  // within the margin at the decode shape
  EXPECT_FALSE(p.FmaFaster());
  p.fma_small_us = 80;
  EXPECT_NE(p.ToString().find("f32 FMA 80 / 800 us"), std::string::npos) << p.ToString();
  EXPECT_EQ(GemmProbe{}.ToString(), "BF16 GEMM probe: not run");
}

TEST(GemmProbeTest, TimesBothPathsOnThisCpu) {
  const KernelVariant* dot = Named("avx512bf16");
  const KernelVariant* fma = Named("avx512bf16-fma");
  if (dot == nullptr || fma == nullptr) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  for (bool onednn : {false, OneDnnBf16Available()}) {
    const GemmProbe p = ProbeBf16Gemm(*dot, *fma, onednn);
    EXPECT_TRUE(p.ran);
    EXPECT_EQ(p.onednn, onednn);
    for (double us : {p.dot_small_us, p.fma_small_us, p.dot_large_us, p.fma_large_us}) {
      EXPECT_TRUE(std::isfinite(us) && us > 0) << p.ToString();
    }
    // 8x the rows is more work for the own kernels. Not for oneDNN's larger product: on a CPU
    // with AMX its BF16 tiles take 64 rows in about the time the own kernel takes 8 (160 and
    // 160 µs on the 2026-12-06 host).
    EXPECT_GT(p.fma_large_us, p.fma_small_us) << p.ToString();
    if (!onednn) {
      EXPECT_GT(p.dot_large_us, p.dot_small_us) << p.ToString();
    }
  }
}

TEST(GemmProbeTest, TheDefaultVariantFollowsItsProbe) {
  const GemmProbe& p = DefaultVariantProbe();
  if (std::getenv("VLS_KERNELS") != nullptr) GTEST_SKIP() << "VLS_KERNELS chooses";
  const KernelVariant* dot = Named("avx512bf16");
  if (dot == nullptr) {
    EXPECT_FALSE(p.ran);
    EXPECT_EQ(&DefaultVariant(), SupportedVariants().back());
    return;
  }
  ASSERT_TRUE(p.ran);
  EXPECT_STREQ(DefaultVariant().name, p.FmaFaster() ? "avx512bf16-fma" : "avx512bf16")
      << p.ToString();
}

}  // namespace
}  // namespace vls::kernels
