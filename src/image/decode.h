// Image decoding: JPEG, PNG and WebP bytes -> RgbImage, pixel for pixel what Hugging Face
// transformers gets from `load_image` (PIL.Image.open, ImageOps.exif_transpose, convert("RGB"))
// with Debian's Pillow 9.4 on the same libjpeg-turbo / libwebp. docs/images.md states the rules.
//
// Every input is untrusted: sizes are checked from the header before any pixel buffer exists,
// library errors and warnings never reach stderr or exit(), and every refusal is a Status whose
// message begins with the caller's label ("photo.jpg: JPEG data is truncated").
#ifndef VLSTACK_IMAGE_DECODE_H_
#define VLSTACK_IMAGE_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "image/image.h"

namespace vls::image {

// Bytes of one image file (LoadImageFile reads at most this much).
inline constexpr size_t kMaxImageFileBytes = size_t{64} << 20;  // 64 MiB
// Pixels (width * height, of the WebP canvas for an animation): PIL's own decompression-bomb
// refusal, 2 * Image.MAX_IMAGE_PIXELS, so every image PIL opens is decoded here too. At 3 bytes
// a pixel the result is at most 512 MiB.
inline constexpr int64_t kMaxImagePixels = 178956970;
// Either side: JPEG and WebP cannot exceed it (65,500 and 16,383); a PNG can, and is refused.
inline constexpr int kMaxImageSide = 65535;

struct DecodeLimits {
  int64_t max_pixels = kMaxImagePixels;
  size_t max_file_bytes = kMaxImageFileBytes;
  int max_side = kMaxImageSide;
};

enum class ImageFormat { kJpeg, kPng, kWebp };

std::string_view ImageFormatName(ImageFormat format);  // "JPEG", "PNG", "WebP"

// The format named by the magic bytes (never the file name). InvalidArgument for an empty
// input or bytes that are no image; Unimplemented, naming it, for a recognised but unsupported
// format (GIF, BMP, TIFF, AVIF/HEIC, ICO, PNM, JPEG 2000, JPEG XL, SVG/XML).
StatusOr<ImageFormat> SniffImageFormat(std::span<const uint8_t> bytes, const std::string& label);

// Decodes a whole image file held in memory. Errors (each message starts with `label`):
//   InvalidArgument / Unimplemented: not an image, or an unsupported format or feature
//     (12-bit or lossless JPEG, 2-component JPEG);
//   OutOfRange: more than limits.max_file_bytes bytes, a side over limits.max_side, more than
//     limits.max_pixels pixels (checked from the header, before the pixel buffer), zero size;
//   DataLoss: truncated or corrupt data (bad CRC, bad Huffman data, broken zlib stream, EXIF
//     block that is not TIFF - PIL's exif_transpose raises on those too).
// Thread safety: none needed; every call has its own decoder state.
StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const std::string& label,
                               const DecodeLimits& limits = {});

// Reads at most limits.max_file_bytes of `path` (ReadFileAtMost: one byte more to see a larger
// file, which is OutOfRange) and decodes it with label = path. NotFound / IoError as
// ReadFileAtMost.
StatusOr<RgbImage> LoadImageFile(const std::string& path, const DecodeLimits& limits = {});

}  // namespace vls::image

#endif  // VLSTACK_IMAGE_DECODE_H_
