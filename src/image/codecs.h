// Internal to vls_image: the per-format decoders behind DecodeImage, and the EXIF orientation
// rules they share. Not for use outside src/image.
#ifndef VLSTACK_IMAGE_CODECS_H_
#define VLSTACK_IMAGE_CODECS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "image/decode.h"
#include "image/image.h"

namespace vls::image::internal {

// The pixels and the EXIF block that PIL would find in the file (`Image.info["exif"]` after
// open, or after load for PNG), still untransposed.
struct Decoded {
  RgbImage image;
  bool has_exif = false;
  std::vector<uint8_t> exif;
  // JPEG only: PIL reads the EXIF at open (for a dpi) and swallows a non-TIFF header unless a
  // JFIF APP0 with density unit 1 came before it; every other case raises (see exif.cc).
  bool ignore_bad_exif_prefix = false;
};

// OutOfRange (naming `format` and the bound) unless 1 <= width, height <= limits.max_side;
// InvalidArgument unless width * height <= limits.max_pixels.
Status CheckImageSize(int64_t width, int64_t height, const DecodeLimits& limits,
                      const std::string& label, const char* format);

// What DecodeImage lends a decoder besides the limits.
struct DecodeHooks {
  // Called once with the output size, after CheckImageSize and before any buffer of that size
  // exists: charges the request's budget and takes the process-wide lease (held by the caller
  // until the decode ends). A refusal is returned as the decode's error.
  std::function<Status(int64_t width, int64_t height)> admit;
  // True when the caller is gone: polled between rows.
  std::function<bool()> cancelled;
};

StatusOr<Decoded> DecodeJpeg(std::span<const uint8_t> bytes, const std::string& label,
                             const DecodeLimits& limits, const DecodeHooks& hooks);
StatusOr<Decoded> DecodePng(std::span<const uint8_t> bytes, const std::string& label,
                            const DecodeLimits& limits, const DecodeHooks& hooks);
StatusOr<Decoded> DecodeWebp(std::span<const uint8_t> bytes, const std::string& label,
                             const DecodeLimits& limits, const DecodeHooks& hooks);

// Grows `pixels` to `size` bytes (rows as they decode), never past `total`: capacity doubles,
// so a file that declares more rows than its data holds costs only what it decoded.
void GrowPixels(std::vector<uint8_t>* pixels, size_t size, size_t total);

// The EXIF orientation PIL 9.4 acts on: Image.Exif().load(exif).get(0x0112) mapped through
// ImageOps.exif_transpose's table; 1 (nothing to do) for anything else. The parse follows PIL's
// ImageFileDirectory_v2 entry by entry, every offset checked against the block. DataLoss where
// PIL raises: a header that is not TIFF (unless ignore_bad_prefix) or shorter than 8 bytes.
StatusOr<int> ExifOrientation(std::span<const uint8_t> exif, bool ignore_bad_prefix,
                              const std::string& label);

// PIL's Image.transpose for orientation 2..8 (FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM,
// TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90); 1 returns the image unchanged.
RgbImage ApplyOrientation(RgbImage image, int orientation);

}  // namespace vls::image::internal

#endif  // VLSTACK_IMAGE_CODECS_H_
