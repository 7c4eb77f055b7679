// The C++ side of the preprocessing oracle (tests/oracle/preprocess_cases.py): reads the cases
// tests/oracle/preprocess_ref.py wrote (transformers' Python + torchvision) and checks
// PreprocessImages against them.
//
// usage: preprocess_oracle_test CASES_DIR
// Per case prints PASS/FAIL with the resized pixels' max difference and share of exact pixels
// and the same for pixel_values; exits 1 when a case fails. Tolerances: grids exact; resized
// pixels within 1 level; pixel_values within one level after normalising (rescale / |std|)
// plus 1e-6.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "io/safetensors.h"
#include "io/untrusted_json.h"
#include "vision/preprocess.h"
#include "vision/resize.h"

namespace vls {
namespace {

struct Stats {
  double max_diff = 0;
  int64_t exact = 0;
  int64_t total = 0;
  void Add(double d) {
    max_diff = std::max(max_diff, d);
    exact += d == 0;
    ++total;
  }
  double ExactShare() const { return total ? 100.0 * exact / total : 100.0; }
};

StatusOr<TensorView> Get(const SafetensorsFile& f, const std::string& name, DType dtype) {
  const SafetensorsEntry* e = f.Find(name);
  if (e == nullptr || e->dtype != dtype) {
    return DataLoss(f.path() + ": no tensor " + name + " of the expected dtype");
  }
  return f.View(*e);
}

StatusOr<image::RgbImage> GetImage(const SafetensorsFile& f, const std::string& name) {
  VLS_ASSIGN_OR_RETURN(TensorView v, Get(f, name, DType::kI32));
  if (v.shape.size() != 3 || v.shape[2] != 3) return DataLoss(name + ": not [H, W, 3]");
  image::RgbImage im;
  im.height = static_cast<int>(v.shape[0]);
  im.width = static_cast<int>(v.shape[1]);
  im.pixels.resize(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) im.pixels[i] = static_cast<uint8_t>(v.i32()[i]);
  return im;
}

// Checks one case; returns the failure or OK, and prints the measurements.
Status CheckCase(const std::string& dir, const nlohmann::json& c, Stats* all_resized,
                 Stats* all_values) {
  const std::string name = c.at("name").get<std::string>();
  VLS_ASSIGN_OR_RETURN(ImageProcessorConfig cfg,
                       ParseImageProcessorConfig(DumpJsonSafe(c.at("config")), name + " config"));
  VLS_ASSIGN_OR_RETURN(auto file,
                       SafetensorsFile::Open(JoinPath(dir, c.at("file").get<std::string>())));
  std::vector<image::RgbImage> images;
  for (int k = 0; k < c.at("images").get<int>(); ++k) {
    VLS_ASSIGN_OR_RETURN(auto im, GetImage(*file, "image_" + std::to_string(k)));
    images.push_back(std::move(im));
  }
  auto pv = PreprocessImages(images, cfg);
  if (!c.at("error").is_null()) {
    const std::string want = c.at("error").get<std::string>();
    if (pv.ok()) return Internal("accepted; the reference refuses it (" + want + ")");
    if (pv.status().message().find(want) == std::string::npos) {
      return Internal("refused with '" + pv.status().ToString() + "', want '" + want + "'");
    }
    std::printf("PASS %s: refused as the reference: %s\n", name.c_str(),
                pv.status().ToString().c_str());
    return Status::Ok();
  }
  if (!pv.ok()) return pv.status();
  // Grids: exact.
  VLS_ASSIGN_OR_RETURN(TensorView grid, Get(*file, "grid_thw", DType::kI32));
  if (grid.numel() != 3 * static_cast<int64_t>(images.size()) ||
      pv->grids.size() != images.size()) {
    return Internal("grid count differs");
  }
  for (size_t k = 0; k < images.size(); ++k) {
    const GridThw want{grid.i32()[3 * k], grid.i32()[3 * k + 1], grid.i32()[3 * k + 2]};
    if (!(pv->grids[k] == want)) {
      return Internal("image " + std::to_string(k) + ": grid " + GridToString(pv->grids[k]) +
                      ", reference " + GridToString(want));
    }
  }
  // Resized pixels: within one level of torchvision.
  Stats resized;
  for (size_t k = 0; k < images.size(); ++k) {
    VLS_ASSIGN_OR_RETURN(auto ref, GetImage(*file, "resized_" + std::to_string(k)));
    const image::RgbImage mine =
        ResizeBicubicAntialias(images[k], ref.height, ref.width);  // what PreprocessImages ran
    for (size_t i = 0; i < ref.pixels.size(); ++i) {
      resized.Add(std::abs(int{mine.pixels[i]} - int{ref.pixels[i]}));
    }
  }
  // pixel_values: within one input level after normalising, plus 1e-6.
  VLS_ASSIGN_OR_RETURN(TensorView values, Get(*file, "pixel_values", DType::kF32));
  if (values.shape != Shape{pv->rows, pv->cols}) {
    return Internal("pixel_values " + ShapeToString(values.shape) + ", mine [" +
                    std::to_string(pv->rows) + "," + std::to_string(pv->cols) + "]");
  }
  const int64_t per_channel = pv->cols / 3;
  double tol[3];
  for (int ch = 0; ch < 3; ++ch) {
    const double step = cfg.do_rescale ? cfg.rescale_factor : 1.0;
    tol[ch] = (cfg.do_normalize ? step / std::fabs(cfg.image_std[ch]) : step) + 1e-6;
  }
  Stats vals;
  double worst_ratio = 0;
  for (int64_t i = 0; i < values.numel(); ++i) {
    const double d = std::fabs(double{pv->data[i]} - double{values.f32()[i]});
    vals.Add(d);
    worst_ratio = std::max(worst_ratio, d / tol[(i % pv->cols) / per_channel]);
  }
  all_resized->max_diff = std::max(all_resized->max_diff, resized.max_diff);
  all_resized->exact += resized.exact;
  all_resized->total += resized.total;
  all_values->max_diff = std::max(all_values->max_diff, vals.max_diff);
  all_values->exact += vals.exact;
  all_values->total += vals.total;
  const bool ok = resized.max_diff <= 1 && worst_ratio <= 1;
  std::printf(
      "%s %s: grids exact; resized max diff %g (%.4f%% of %lld exact); pixel_values max "
      "diff %g (%.4f%% exact, %.3g of the tolerance)\n",
      ok ? "PASS" : "FAIL", name.c_str(), resized.max_diff, resized.ExactShare(),
      static_cast<long long>(resized.total), vals.max_diff, vals.ExactShare(), worst_ratio);
  return ok ? Status::Ok() : Internal("over the tolerance");
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASES_DIR (written by preprocess_ref.py --make-cases)\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto text = ReadFileAtMost(JoinPath(dir, "cases.json"), 1 << 20);
  nlohmann::json manifest;
  Status s = text.ok() ? ParseUntrustedJson("cases.json", *text, &manifest) : text.status();
  if (!s.ok() || !manifest.is_array() || manifest.empty()) {
    std::fprintf(stderr, "cannot read %s/cases.json: %s\n", dir.c_str(), s.ToString().c_str());
    return 2;
  }
  int failed = 0;
  Stats resized, values;
  for (const auto& c : manifest) {
    Status r = CheckCase(dir, c, &resized, &values);
    if (!r.ok()) {
      ++failed;
      std::printf("FAIL %s: %s\n", c.value("name", std::string("?")).c_str(), r.ToString().c_str());
    }
  }
  std::printf(
      "%d passed, %d failed; all cases: resized max diff %g, %.4f%% of %lld exact; "
      "pixel_values max diff %g, %.4f%% exact\n",
      static_cast<int>(manifest.size()) - failed, failed, resized.max_diff, resized.ExactShare(),
      static_cast<long long>(resized.total), values.max_diff, values.ExactShare());
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace vls

int main(int argc, char** argv) { return vls::Main(argc, argv); }
