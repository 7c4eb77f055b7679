// Test helpers for FP8 checkpoints (tests only): an independent E4M3 formula, whole-checkpoint
// read / rewrite, and the dequantized copy of an FP8 checkpoint that the loader's results are
// compared with.
#ifndef VLSTACK_MODEL_FP8_TEST_UTIL_H_
#define VLSTACK_MODEL_FP8_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/scratch_test_util.h"
#include "io/safetensors.h"
#include "tensor/tensor.h"

namespace vls::fp8_test {

using Json = nlohmann::json;
using Tensors = std::map<std::string, HostTensor>;

// E4M3 by the OCP formula (sign, exponent with bias 7, 3 mantissa bits, subnormals m/8 · 2^-6,
// S.1111.111 NaN), independent of tensor/dtype.cc.
inline double E4M3(uint8_t code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  return e == 0 ? sign * std::ldexp(m / 8.0, -6) : sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// A folder name under the temp folder, unique to this process (CTest runs tests as concurrent
// processes), removed when the process exits.
inline std::string Scratch(const std::string& tag) {
  return test::ScratchPath("vls_fp8_test_", tag);
}

inline Tensors ReadAll(const std::string& dir) {
  auto f = SafetensorsFile::Open(JoinPath(dir, "model.safetensors"));
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  Tensors out;
  if (!f.ok()) return out;
  for (const SafetensorsEntry& e : (*f)->entries()) {
    out.emplace(e.name, HostTensor::Copy((*f)->View(e)));
  }
  return out;
}

inline void WriteAll(const std::string& dir, const Tensors& tensors) {
  std::vector<NamedTensor> list;
  for (const auto& [name, t] : tensors) list.push_back({name, t.view()});
  EXPECT_TRUE(WriteSafetensors(JoinPath(dir, "model.safetensors"), list).ok());
}

inline Json ReadConfig(const std::string& dir) {
  auto text = ReadFileAtMost(JoinPath(dir, "config.json"), 1 << 20);
  EXPECT_TRUE(text.ok());
  return text.ok() ? Json::parse(*text) : Json();
}

inline void WriteConfig(const std::string& dir, const Json& cfg) {
  EXPECT_TRUE(WriteStringToFile(JoinPath(dir, "config.json"), cfg.dump(2)).ok());
}

// A copy of the single-file checkpoint `src` in Scratch(tag), its tensors and config.json
// changed by the callbacks (either may be empty).
inline std::string Variant(const std::string& src, const std::string& tag,
                           const std::function<void(Tensors&)>& tensors,
                           const std::function<void(Json&)>& config = nullptr) {
  const std::string d = Scratch(tag);
  std::filesystem::remove_all(d);
  std::filesystem::copy(src, d);
  if (tensors) {
    Tensors t = ReadAll(d);
    tensors(t);
    WriteAll(d, t);
  }
  if (config) {
    Json c = ReadConfig(d);
    config(c);
    WriteConfig(d, c);
  }
  return d;
}

// The FP8 checkpoint `src` with every F8_E4M3 weight dequantized by the formula
// (E4M3(code) · scale_inv of its block, in double: exact for BF16 scales) and stored as `dtype`
// (F32: exact; BF16: rounded to nearest even), without scale tensors or quantization_config.
inline std::string Dequantized(const std::string& src, DType dtype) {
  const Json q = ReadConfig(src)["quantization_config"];
  const int64_t bh = q["weight_block_size"][0], bw = q["weight_block_size"][1];
  return Variant(
      src, "deq_" + std::string(DTypeName(dtype)),
      [&](Tensors& t) {
        Tensors out;
        for (auto& [name, w] : t) {
          if (name.ends_with("_scale_inv")) continue;
          if (w.dtype() != DType::kF8E4M3) {
            out.emplace(name, std::move(w));
            continue;
          }
          const std::vector<float> s = ToF32Vector(t.at(name + "_scale_inv").view());
          const int64_t R = w.shape()[0], C = w.shape()[1], gc = (C + bw - 1) / bw;
          std::vector<float> v(static_cast<size_t>(R * C));
          for (int64_t r = 0; r < R; ++r) {
            for (int64_t c = 0; c < C; ++c) {
              const double scale = s[static_cast<size_t>((r / bh) * gc + c / bw)];
              v[static_cast<size_t>(r * C + c)] =
                  static_cast<float>(E4M3(static_cast<uint8_t>(w.data()[r * C + c])) * scale);
            }
          }
          out.emplace(name, FromF32As(dtype, w.shape(), v));
        }
        t = std::move(out);
      },
      [](Json& c) { c.erase("quantization_config"); });
}

}  // namespace vls::fp8_test

#endif  // VLSTACK_MODEL_FP8_TEST_UTIL_H_
