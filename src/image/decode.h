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
#include "image/decode_budget.h"
#include "image/image.h"

namespace vls::image {

// Bytes of one image file (LoadImageFile reads at most this much).
inline constexpr size_t kMaxImageFileBytes = size_t{64} << 20;  // 64 MiB
// PIL's own decompression-bomb refusal, 2 * Image.MAX_IMAGE_PIXELS: the most a caller should
// raise DecodeLimits::max_pixels to. At 3 bytes a pixel the result is at most 512 MiB.
inline constexpr int64_t kMaxImagePixels = 178956970;
// The default per-image budget of decoded pixels (after JPEG's DCT scaling): 2^25, twice the
// largest image Qwen3-VL's preprocessor keeps (max_pixels 16,777,216; a larger image is resized
// down to it anyway), 96 MiB as RGB. A JPEG over it decodes at 1/2, 1/4 or 1/8 scale; a PNG or
// WebP over it is refused (a 29 KB 1-bit PNG can declare 13,377 x 13,377 = 179 M pixels).
inline constexpr int64_t kDefaultMaxDecodePixels = int64_t{1} << 25;
// The default budget of decoded pixels for all the images of one request (ScopedDecodeControl).
inline constexpr int64_t kDefaultMaxRequestDecodePixels = int64_t{1} << 27;
// Either side: JPEG and WebP cannot exceed it (65,500 and 16,383); a PNG can, and is refused.
inline constexpr int kMaxImageSide = 65535;

struct DecodeLimits {
  // Decoded pixels of one image (width * height, of the WebP canvas for an animation).
  int64_t max_pixels = kDefaultMaxDecodePixels;
  size_t max_file_bytes = kMaxImageFileBytes;
  int max_side = kMaxImageSide;
  // A JPEG over max_pixels decodes at the largest of 1/2, 1/4, 1/8 scale that fits (libjpeg's
  // DCT scaling: the pixels then differ from PIL's full-size decode, which the resize to the
  // model's max_pixels would have shrunk anyway). False: refused like the other formats.
  bool allow_jpeg_scaling = true;
  // The process-wide bound on decodes in flight (null: DecodeBudget::Process()).
  DecodeBudget* budget = nullptr;
  // Polled between rows; true stops the decode with Cancelled (null: never).
  CancelCheck cancelled = nullptr;
};

// For callers that cannot pass DecodeLimits down to DecodeImage (ImageEncoder holds its own):
// while one is alive, every DecodeImage on this thread also stops when `cancelled` says so and
// draws each image's decoded pixels from a budget for the whole request (`max_request_pixels`;
// an image over what is left is refused with InvalidArgument). Scopes nest (the inner one
// applies). REQUIRES: destroyed on the thread that made it, in reverse order of creation.
class ScopedDecodeControl {
 public:
  explicit ScopedDecodeControl(CancelCheck cancelled,
                               int64_t max_request_pixels = kDefaultMaxRequestDecodePixels);
  ~ScopedDecodeControl();
  ScopedDecodeControl(const ScopedDecodeControl&) = delete;
  ScopedDecodeControl& operator=(const ScopedDecodeControl&) = delete;

  bool cancelled() const { return cancelled_ && cancelled_(); }
  int64_t pixels_left() const { return pixels_left_; }
  // Takes `pixels` from what the request has left; InvalidArgument naming `label` when they do
  // not fit.
  Status Charge(int64_t pixels, const std::string& label);
  // The innermost scope of this thread, or null.
  static ScopedDecodeControl* Current();

 private:
  CancelCheck cancelled_;
  int64_t max_request_pixels_;
  int64_t pixels_left_;
  ScopedDecodeControl* outer_;
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
//   OutOfRange: more than limits.max_file_bytes bytes, a side over limits.max_side, zero size;
//   InvalidArgument: more than limits.max_pixels decoded pixels (even at 1/8 scale for a
//     JPEG), or more than the request has left (ScopedDecodeControl), checked from the header
//     before any pixel buffer; the message names the image, its size and the limit;
//   ResourceExhausted: the process-wide DecodeBudget had no room within its wait;
//   Cancelled: limits.cancelled (or the thread's ScopedDecodeControl) said so;
//   DataLoss: truncated or corrupt data (bad CRC, bad Huffman data, broken zlib stream, EXIF
//     block that is not TIFF - PIL's exif_transpose raises on those too).
// Memory: the pixel buffer grows as rows decode, and a PNG or JPEG whose data is too short to
// hold its declared size is refused (DataLoss) before any of it is allocated.
// Thread safety: none needed; every call has its own decoder state.
StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const std::string& label,
                               const DecodeLimits& limits = {});

// Reads at most limits.max_file_bytes of `path` (ReadFileAtMost: one byte more to see a larger
// file, which is OutOfRange) and decodes it with label = path. NotFound / IoError as
// ReadFileAtMost.
StatusOr<RgbImage> LoadImageFile(const std::string& path, const DecodeLimits& limits = {});

}  // namespace vls::image

#endif  // VLSTACK_IMAGE_DECODE_H_
