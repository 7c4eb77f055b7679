// FP8 block-quantized weights (model/fp8_weights.h): the per-tensor rule with every refusal,
// and the block dequantization against an independent formula (edge blocks included). Loading
// whole checkpoints: fp8_load_test.cc.
#include "model/fp8_weights.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>

namespace vls {
namespace {

// E4M3 by the OCP formula, independent of tensor/dtype.cc.
double E4M3(uint8_t code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  return e == 0 ? sign * std::ldexp(m / 8.0, -6) : sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// Random codes without NaN, [rows, cols].
HostTensor RandomCodes(int64_t rows, int64_t cols, uint32_t seed) {
  HostTensor t(DType::kF8E4M3, {rows, cols});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < rows * cols; ++i) {
    uint8_t c = static_cast<uint8_t>(rng());
    if (F8E4M3IsNaN(c)) c = 0x7E;
    t.data()[i] = static_cast<std::byte>(c);
  }
  return t;
}

// Random positive BF16 scales [gr, gc] spanning many binades.
HostTensor RandomScales(int64_t gr, int64_t gc, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<size_t>(gr * gc));
  for (float& x : v)
    x = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 999.0f,
                   static_cast<int>(rng() % 40) - 30);
  return FromF32As(DType::kBF16, {gr, gc}, v);
}

Fp8Quantization Blocks(int64_t bh, int64_t bw) {
  Fp8Quantization q;
  q.block_rows = bh;
  q.block_cols = bw;
  return q;
}

TEST(Fp8WeightsTest, DequantizesEveryBlockIncludingEdgeBlocksExactly) {
  // 130 x 257 in 128 x 128 blocks leaves a 2-row and a 1-column edge; 48 x 40 leaves others.
  for (const auto& [bh, bw] : {std::pair<int64_t, int64_t>{128, 128}, {48, 40}, {1, 257}}) {
    const int64_t R = 130, C = 257, gr = (R + bh - 1) / bh, gc = (C + bw - 1) / bw;
    HostTensor codes = RandomCodes(R, C, 7);
    HostTensor scales = RandomScales(gr, gc, 9);
    const TensorView sv = scales.view();
    auto s = BindFp8Scales(Blocks(bh, bw), "m.weight", codes.view(), &sv);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->grid_rows, gr);
    EXPECT_EQ(s->grid_cols, gc);
    const kernels::Matrix w{DType::kF8E4M3, codes.data(), R, C};
    // Whole matrix, and a row range that starts and ends inside blocks.
    for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, R}, {47, 129}}) {
      std::vector<float> out(static_cast<size_t>((r1 - r0) * C));
      int64_t br = -1, bc = -1;
      ASSERT_TRUE(DequantizeFp8Rows(w, *s, r0, r1, out.data(), &br, &bc));
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          const auto code = static_cast<uint8_t>(codes.data()[r * C + c]);
          const double scale = Bf16ToF32(scales.view().u16()[(r / bh) * gc + c / bw]);
          // An E4M3 value times a BF16 scale has at most 12 significant bits: exact in f32.
          ASSERT_EQ(static_cast<double>(out[size_t((r - r0) * C + c)]), E4M3(code) * scale)
              << "block " << bh << "x" << bw << " at [" << r << ", " << c << "]";
        }
      }
    }
  }
}

TEST(Fp8WeightsTest, F32ScalesRoundTheProductOnceAsTheReferencesDo) {
  HostTensor codes(DType::kF8E4M3, {1, 2});
  codes.data()[0] = static_cast<std::byte>(0x39);    // 1.125
  codes.data()[1] = static_cast<std::byte>(0x3B);    // 1.375
  const float scale = 1.0f + std::ldexp(1.0f, -23);  // 24 significant bits
  HostTensor scales = HostTensor::FromF32({1, 1}, std::vector<float>{scale});
  const TensorView sv = scales.view();
  auto s = BindFp8Scales(Blocks(128, 128), "m.weight", codes.view(), &sv);
  ASSERT_TRUE(s.ok());
  float out[2];
  int64_t br, bc;
  ASSERT_TRUE(DequantizeFp8Rows({DType::kF8E4M3, codes.data(), 1, 2}, *s, 0, 1, out, &br, &bc));
  const volatile float a = 1.125f, b = 1.375f;  // the f32 products, computed separately
  EXPECT_EQ(out[0], a * scale);
  EXPECT_EQ(out[1], b * scale);
  EXPECT_NE(static_cast<double>(out[0]), 1.125 * static_cast<double>(scale));  // it did round
}

TEST(Fp8WeightsTest, ANaNCodeIsFoundWithItsPlace) {
  HostTensor codes = RandomCodes(130, 257, 3);
  codes.data()[129 * 257 + 200] = static_cast<std::byte>(0xFF);
  HostTensor scales = RandomScales(2, 3, 4);
  const TensorView sv = scales.view();
  auto s = BindFp8Scales(Blocks(128, 128), "m.weight", codes.view(), &sv);
  ASSERT_TRUE(s.ok());
  std::vector<float> out(130 * 257);
  int64_t br = -1, bc = -1;
  const kernels::Matrix w{DType::kF8E4M3, codes.data(), 130, 257};
  EXPECT_TRUE(DequantizeFp8Rows(w, *s, 0, 129, out.data(), &br, &bc));  // not in these rows
  EXPECT_FALSE(DequantizeFp8Rows(w, *s, 0, 130, out.data(), &br, &bc));
  EXPECT_EQ(br, 129);
  EXPECT_EQ(bc, 200);
  const Status e = Fp8NaNError("model.layers.0.mlp.up_proj.weight", br, bc);
  EXPECT_EQ(e.code(), StatusCode::kDataLoss);
  EXPECT_NE(e.message().find("'model.layers.0.mlp.up_proj.weight'"), std::string::npos);
  EXPECT_NE(e.message().find("[129, 200]"), std::string::npos);
}

// BindFp8Scales's refusal for (quant, weight, scale), checking the code and the message.
void ExpectBindError(const std::optional<Fp8Quantization>& q, const HostTensor& weight,
                     const HostTensor* scale, StatusCode code, const std::string& needle) {
  const TensorView sv = scale != nullptr ? scale->view() : TensorView{};
  auto s = BindFp8Scales(q, "model.layers.0.mlp.up_proj.weight", weight.view(),
                         scale != nullptr ? &sv : nullptr);
  ASSERT_FALSE(s.ok()) << needle;
  EXPECT_EQ(s.status().code(), code) << s.status().ToString();
  EXPECT_NE(s.status().message().find(needle), std::string::npos)
      << needle << " in " << s.status().ToString();
}

TEST(Fp8WeightsTest, EveryMismatchIsRefusedNamingTheTensor) {
  const HostTensor codes = RandomCodes(130, 257, 1);
  const HostTensor scales = RandomScales(2, 3, 2);
  const HostTensor bf16 = FromF32As(DType::kBF16, {130, 257}, std::vector<float>(130 * 257, 1));
  const Fp8Quantization q = Blocks(128, 128);
  // A float weight without scales is simply not FP8; with scales it is a mismatch.
  auto plain = BindFp8Scales(q, "w.weight", bf16.view(), nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->fp8());
  ExpectBindError(q, bf16, &scales, StatusCode::kInvalidArgument,
                  "'model.layers.0.mlp.up_proj.weight_scale_inv' is given but");
  ExpectBindError(std::nullopt, codes, &scales, StatusCode::kInvalidArgument,
                  "declares no quantization_config");
  Fp8Quantization excluding = q;
  excluding.excluded_modules = {"model.layers.*.mlp"};
  ExpectBindError(excluding, codes, &scales, StatusCode::kInvalidArgument,
                  "modules_to_not_convert lists its module ('model.layers.*.mlp')");
  ExpectBindError(q, codes, nullptr, StatusCode::kInvalidArgument,
                  "'model.layers.0.mlp.up_proj.weight_scale_inv' are missing");
  const HostTensor transposed = RandomScales(3, 2, 2);
  ExpectBindError(q, codes, &transposed, StatusCode::kInvalidArgument, "needs [2,3]");
  const HostTensor flat = RandomScales(1, 6, 2);
  ExpectBindError(q, codes, &flat, StatusCode::kInvalidArgument, "has shape [1,6]");
  const HostTensor ints = HostTensor::FromI32({2, 3}, std::vector<int32_t>(6, 1));
  ExpectBindError(q, codes, &ints, StatusCode::kInvalidArgument, "block scales must be F32");
  const HostTensor f8_scales(DType::kF8E4M3, {2, 3});
  ExpectBindError(q, codes, &f8_scales, StatusCode::kInvalidArgument, "has dtype F8_E4M3");
  const HostTensor vector_codes = RandomCodes(1, 4, 1);
  HostTensor flat_codes = HostTensor::Copy(vector_codes.view());
  TensorView v = flat_codes.view();
  v.shape = {4};
  const HostTensor one = RandomScales(1, 1, 1);
  const TensorView ov = one.view();
  auto vec = BindFp8Scales(q, "n.weight", v, &ov);
  ASSERT_FALSE(vec.ok());
  EXPECT_NE(vec.status().message().find("only 2-D Linear weights"), std::string::npos);
}

TEST(Fp8WeightsTest, ScaleValuesMustBeFiniteNonNegativeAndInRange) {
  const HostTensor codes = RandomCodes(130, 257, 1);
  const Fp8Quantization q = Blocks(128, 128);
  const float bad[] = {NAN,
                       INFINITY,
                       -INFINITY,
                       -1.0f,
                       -std::ldexp(1.0f, -20),
                       std::nextafter(FLT_MAX / 448.0f, INFINITY),
                       FLT_MAX};
  for (float b : bad) {
    std::vector<float> v(6, 0.5f);
    v[4] = b;  // block [1, 1]
    const HostTensor scales = HostTensor::FromF32({2, 3}, v);
    ExpectBindError(q, codes, &scales, StatusCode::kDataLoss, "block [1, 1] holds");
  }
  // BF16 scales too (a BF16 NaN, and a value above FLT_MAX / 448).
  for (float b : {NAN, 1e38f}) {
    std::vector<float> v(6, 0.5f);
    v[5] = b;
    const HostTensor scales = FromF32As(DType::kBF16, {2, 3}, v);
    ExpectBindError(q, codes, &scales, StatusCode::kDataLoss, "block [1, 2] holds");
  }
  // Zero (either sign), tiny and the largest allowed scale are accepted; a zero scale zeroes its
  // block.
  const HostTensor ok = HostTensor::FromF32(
      {2, 3}, std::vector<float>{0.0f, -0.0f, FLT_MAX / 448.0f, std::ldexp(1.0f, -149), 1, 2});
  const TensorView ov = ok.view();
  auto s = BindFp8Scales(q, "w.weight", codes.view(), &ov);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<float> out(130 * 257);
  int64_t br, bc;
  ASSERT_TRUE(DequantizeFp8Rows({DType::kF8E4M3, codes.data(), 130, 257}, *s, 0, 130, out.data(),
                                &br, &bc));
  for (int64_t c = 0; c < 256; ++c) EXPECT_EQ(out[size_t(c)], 0.0f);
  for (float f : out) EXPECT_TRUE(std::isfinite(f));
}

}  // namespace
}  // namespace vls
