// Fuzz target for image decoding (src/image/decode.h): JPEG, PNG and WebP bytes from outside.
//
// Every input must give a Status naming the label or an image that keeps the limits it was
// decoded under, with exactly width * height * 3 bytes. Decoding is deterministic. The limits
// are smaller than the defaults (4 Mi pixels) so that a small input declaring a large image
// stays fast; the header check is the same code at any bound.
//
// Real fuzzing: scripts/fuzz.sh 600 image_decode. Without libFuzzer, `image_decode_fuzz_replay`
// (a ctest) runs this target over tests/corpus/image_decode and mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "image/decode.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "image_decode_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vls::image::DecodeLimits limits;
  limits.max_pixels = int64_t{1} << 22;
  limits.max_side = 8192;
  const std::span<const uint8_t> bytes(data, size);
  auto img = vls::image::DecodeImage(bytes, "fuzz.img", limits);
  if (std::getenv("VLS_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "%s\n", img.ok() ? "ok" : img.status().ToString().c_str());
  }
  if (!img.ok()) {
    if (img.status().message().rfind("fuzz.img: ", 0) != 0) {
      Fail("error message does not start with the label", img.status().ToString());
    }
    return 0;
  }
  const int64_t w = img->width;
  const int64_t h = img->height;
  if (w < 1 || h < 1 || w > limits.max_side || h > limits.max_side || w * h > limits.max_pixels) {
    Fail("accepted an image outside the limits", std::to_string(w) + "x" + std::to_string(h));
  }
  if (img->pixels.size() != static_cast<size_t>(w * h * 3)) Fail("pixel buffer size", "");
  auto again = vls::image::DecodeImage(bytes, "fuzz.img", limits);
  if (!again.ok() || again->pixels != img->pixels || again->width != img->width) {
    Fail("decoding is not deterministic", "");
  }
  return 0;
}
