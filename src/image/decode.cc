// DecodeImage: sniff the format, decode, apply the EXIF orientation (PIL's exif_transpose).
#include "image/decode.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/file.h"
#include "image/codecs.h"

namespace vls::image {
namespace {

bool StartsWith(std::span<const uint8_t> b, size_t at, const char* magic, size_t n) {
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

// Printable ASCII of the first bytes, others as \xNN, for "starts with ..." messages.
std::string Preview(std::span<const uint8_t> b) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size() && i < 12; ++i) {
    const uint8_t c = b[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += static_cast<char>(c);
    } else {
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  return s;
}

// Recognised formats this decoder does not take, by their magic bytes.
const char* UnsupportedFormat(std::span<const uint8_t> b) {
  if (StartsWith(b, 0, "GIF87a", 6) || StartsWith(b, 0, "GIF89a", 6)) return "GIF";
  if (StartsWith(b, 0, "BM", 2)) return "BMP";
  if (StartsWith(b, 0, "II*\0", 4) || StartsWith(b, 0, "MM\0*", 4)) return "TIFF";
  if (StartsWith(b, 4, "ftyp", 4)) {
    if (StartsWith(b, 8, "avi", 3)) return "AVIF";
    if (StartsWith(b, 8, "hei", 3) || StartsWith(b, 8, "hev", 3) || StartsWith(b, 8, "mif1", 4) ||
        StartsWith(b, 8, "msf1", 4)) {
      return "HEIF/HEIC";
    }
    return "ISO media (MP4/HEIF family)";
  }
  if (StartsWith(b, 0, "\0\0\1\0", 4)) return "ICO";
  if (StartsWith(b, 0, "\0\0\0\x0cjP  ", 8) || StartsWith(b, 0, "\xff\x4f\xff\x51", 4)) {
    return "JPEG 2000";
  }
  if (StartsWith(b, 0, "\xff\x0a", 2) || StartsWith(b, 0, "\0\0\0\x0cJXL ", 8)) return "JPEG XL";
  if (StartsWith(b, 0, "qoif", 4)) return "QOI";
  if (StartsWith(b, 0, "RIFF", 4)) return "RIFF (not WebP)";
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return "PNM/PAM";
  // SVG and other XML: skip a UTF-8 BOM and white space, then "<".
  size_t i = StartsWith(b, 0, "\xef\xbb\xbf", 3) ? 3 : 0;
  while (i < b.size() && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n')) ++i;
  if (i < b.size() && b[i] == '<') return "SVG/XML";
  return nullptr;
}

}  // namespace

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kWebp: return "WebP";
  }
  return "?";
}

StatusOr<ImageFormat> SniffImageFormat(std::span<const uint8_t> bytes, const std::string& label) {
  if (bytes.empty()) return InvalidArgument(label + ": empty file, not an image");
  // The magic bytes Pillow's plugins accept.
  if (StartsWith(bytes, 0, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (StartsWith(bytes, 0, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (StartsWith(bytes, 0, "RIFF", 4) && StartsWith(bytes, 8, "WEBP", 4)) {
    return ImageFormat::kWebp;
  }
  if (const char* name = UnsupportedFormat(bytes)) {
    return Unimplemented(label + ": " + name +
                         " images are not supported (JPEG, PNG and WebP are)");
  }
  return InvalidArgument(label + ": not a JPEG, PNG or WebP image (starts with \"" +
                         Preview(bytes) + "\")");
}

namespace internal {

Status CheckImageSize(int64_t width, int64_t height, const DecodeLimits& limits,
                      const std::string& label, const char* format) {
  const std::string dims = std::to_string(width) + " x " + std::to_string(height);
  if (width < 1 || height < 1) {
    return OutOfRange(label + ": " + format + " image is " + dims + ": no pixels");
  }
  if (width > limits.max_side || height > limits.max_side) {
    return OutOfRange(label + ": " + format + " image is " + dims + ", a side over " +
                      std::to_string(limits.max_side) + " (kMaxImageSide)");
  }
  if (width * height > limits.max_pixels) {
    return InvalidArgument(label + ": " + format + " image is " + dims + " = " +
                           std::to_string(width * height) + " pixels, over the limit of " +
                           std::to_string(limits.max_pixels) +
                           " decoded pixels per image (kDefaultMaxDecodePixels)");
  }
  return Status::Ok();
}

void GrowPixels(std::vector<uint8_t>* pixels, size_t size, size_t total) {
  if (size > pixels->capacity()) {
    constexpr size_t kFirst = size_t{1} << 20;
    pixels->reserve(std::min(total, std::max({size, 2 * pixels->capacity(), kFirst})));
  }
  pixels->resize(size);
}

}  // namespace internal

namespace {
thread_local ScopedDecodeControl* current_control = nullptr;
}  // namespace

ScopedDecodeControl::ScopedDecodeControl(CancelCheck cancelled, int64_t max_request_pixels)
    : cancelled_(std::move(cancelled)),
      max_request_pixels_(max_request_pixels),
      pixels_left_(max_request_pixels),
      outer_(current_control) {
  current_control = this;
}

ScopedDecodeControl::~ScopedDecodeControl() { current_control = outer_; }

ScopedDecodeControl* ScopedDecodeControl::Current() { return current_control; }

Status ScopedDecodeControl::Charge(int64_t pixels, const std::string& label) {
  if (pixels > pixels_left_) {
    return InvalidArgument(label + ": decodes to " + std::to_string(pixels) +
                           " pixels, over what is left of the request's limit of " +
                           std::to_string(max_request_pixels_) + " decoded pixels (" +
                           std::to_string(pixels_left_) + " left)");
  }
  pixels_left_ -= pixels;
  return Status::Ok();
}

StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const std::string& label,
                               const DecodeLimits& limits) {
  if (bytes.size() > limits.max_file_bytes) {
    return OutOfRange(label + ": image file is over " + std::to_string(limits.max_file_bytes) +
                      " bytes (kMaxImageFileBytes)");
  }
  VLS_ASSIGN_OR_RETURN(const ImageFormat format, SniffImageFormat(bytes, label));
  ScopedDecodeControl* control = ScopedDecodeControl::Current();
  internal::DecodeHooks hooks;
  hooks.cancelled = [&limits, control]() {
    return (limits.cancelled && limits.cancelled()) || (control != nullptr && control->cancelled());
  };
  if (hooks.cancelled()) return Cancelled(label + ": cancelled before decoding");
  DecodeBudget& budget = limits.budget != nullptr ? *limits.budget : DecodeBudget::Process();
  DecodeBudget::Lease lease;  // held until the decoded image is returned
  hooks.admit = [&](int64_t width, int64_t height) -> Status {
    if (control != nullptr) VLS_RETURN_IF_ERROR(control->Charge(width * height, label));
    VLS_ASSIGN_OR_RETURN(lease, budget.Acquire(width * height, label, hooks.cancelled));
    return Status::Ok();
  };
  StatusOr<internal::Decoded> decoded = Internal("unreachable");
  switch (format) {
    case ImageFormat::kJpeg: decoded = internal::DecodeJpeg(bytes, label, limits, hooks); break;
    case ImageFormat::kPng: decoded = internal::DecodePng(bytes, label, limits, hooks); break;
    case ImageFormat::kWebp: decoded = internal::DecodeWebp(bytes, label, limits, hooks); break;
  }
  if (!decoded.ok()) return decoded.status();
  int orientation = 1;
  if (decoded->has_exif) {
    VLS_ASSIGN_OR_RETURN(orientation, internal::ExifOrientation(
                                          decoded->exif, decoded->ignore_bad_exif_prefix, label));
  }
  return internal::ApplyOrientation(std::move(decoded->image), orientation);
}

StatusOr<RgbImage> LoadImageFile(const std::string& path, const DecodeLimits& limits) {
  VLS_ASSIGN_OR_RETURN(const std::string bytes, ReadFileAtMost(path, limits.max_file_bytes));
  return DecodeImage(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path,
      limits);
}

}  // namespace vls::image
