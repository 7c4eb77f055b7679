// PNG through libpng, converted as Pillow 9.4 converts (PIL decodes PNG itself, with zlib):
//   grey 1/2/4-bit  -> scaled to 8 bits (0x55 / 0x11 / 0xFF steps), then R = G = B
//   grey 16-bit     -> PIL mode "I": convert("RGB") clips, so every value >= 255 is 255
//   grey+alpha      -> alpha dropped (16-bit: the high byte)
//   RGB, RGBA       -> alpha dropped, 16-bit: the high byte ("RGB;16B")
//   palette         -> the PLTE colours; indices past the PLTE are grey (i, i, i) as in PIL's
//                      palette; tRNS ignored
// Gamma, ICC, sBIT, tRNS are ignored (no libpng transform asks for them). Stricter than PIL:
// libpng checks every chunk's CRC (PIL skips IDAT's) and refuses unknown critical chunks.
//
// libpng reports errors by longjmp to png_jmpbuf: RunPng holds no object with a destructor,
// the state it writes lives in a PngState owned by the caller.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "image/codecs.h"

namespace vls::image::internal {
namespace {

enum class Failure { kNone, kLibrary, kTruncated, kSize, kCancelled, kShortData };
enum class Layout { kGrey8, kGrey16, kRgb8, kPalette };

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  Failure failure = Failure::kNone;
  char library_message[256] = {};
  DecodeLimits limits;
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  uint8_t palette[256 * 3] = {};
  Layout layout = Layout::kRgb8;
  int depth = 0;
  int color = 0;
  std::vector<uint8_t> rows;  // one row, or every row of an interlaced image
  RgbImage* out = nullptr;
  const std::function<bool()>* cancelled = nullptr;
};

void OnError(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->library_message, sizeof s->library_message, "%s", msg);
  if (s->failure == Failure::kNone) s->failure = Failure::kLibrary;
  png_longjmp(png, 1);
}

void OnWarning(png_structp /*png*/, png_const_charp /*msg*/) {}  // PIL has none: ignore

void OnRead(png_structp png, png_bytep out, size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) {
    s->failure = Failure::kTruncated;
    png_error(png, "truncated");
  }
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}

void ToRgb(const PngState& s, Layout layout, const uint8_t* src, uint8_t* dst) {
  for (size_t x = 0; x < s.width; ++x, dst += 3) {
    switch (layout) {
      case Layout::kGrey8: dst[0] = dst[1] = dst[2] = src[x]; break;
      case Layout::kGrey16:
        dst[0] = dst[1] = dst[2] = src[2 * x] != 0 ? 255 : src[2 * x + 1];
        break;
      case Layout::kRgb8: std::memcpy(dst, src + 3 * x, 3); break;
      case Layout::kPalette: std::memcpy(dst, s.palette + 3 * src[x], 3); break;
    }
  }
}

// The header (up to the first IDAT): size, colour type, palette, transforms.
bool RunPngHeader(PngState* s) {
  if (setjmp(png_jmpbuf(s->png)) != 0) return false;
  png_set_read_fn(s->png, s, OnRead);
  // Sizes are ours to check; CRC errors in any chunk are errors.
  png_set_user_limits(s->png, 0x7fffffff, 0x7fffffff);
  png_set_crc_action(s->png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_read_info(s->png, s->info);
  int interlace = 0;
  int& depth = s->depth;
  int& color = s->color;
  png_get_IHDR(s->png, s->info, &s->width, &s->height, &depth, &color, &interlace, nullptr,
               nullptr);
  const int64_t pixels = static_cast<int64_t>(s->width) * s->height;
  if (s->width < 1 || s->height < 1 || s->width > static_cast<png_uint_32>(s->limits.max_side) ||
      s->height > static_cast<png_uint_32>(s->limits.max_side) || pixels > s->limits.max_pixels) {
    s->failure = Failure::kSize;
    return false;
  }
  Layout layout = Layout::kRgb8;
  switch (color) {
    case PNG_COLOR_TYPE_GRAY:
      if (depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
      layout = depth == 16 ? Layout::kGrey16 : Layout::kGrey8;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      png_set_strip_alpha(s->png);
      png_set_strip_16(s->png);
      layout = Layout::kGrey8;
      break;
    case PNG_COLOR_TYPE_PALETTE: {
      png_set_packing(s->png);
      for (int i = 0; i < 256; ++i) std::memset(s->palette + 3 * i, i, 3);
      png_colorp plte = nullptr;
      int n = 0;
      if (png_get_PLTE(s->png, s->info, &plte, &n) != 0) {
        for (int i = 0; i < n && i < 256; ++i) {
          s->palette[3 * i] = plte[i].red;
          s->palette[3 * i + 1] = plte[i].green;
          s->palette[3 * i + 2] = plte[i].blue;
        }
      }
      layout = Layout::kPalette;
      break;
    }
    default:  // RGB, RGBA
      png_set_strip_alpha(s->png);
      png_set_strip_16(s->png);
      layout = Layout::kRgb8;
      break;
  }
  s->layout = layout;
  return true;
}

// The rows, after the caller admitted the size. The output grows as rows decode; an interlaced
// image needs every row before the last pass (its size is already proven by FitsImageData).
bool RunPngBody(PngState* s) {
  if (setjmp(png_jmpbuf(s->png)) != 0) return false;
  const Layout layout = s->layout;
  const int passes = png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  const size_t row_bytes = png_get_rowbytes(s->png, s->info);
  const size_t w = s->width;
  const size_t h = s->height;
  s->out->width = static_cast<int>(w);
  s->out->height = static_cast<int>(h);
  if (passes == 1) {
    s->rows.resize(row_bytes);
    for (size_t y = 0; y < h; ++y) {
      if ((*s->cancelled)()) {
        s->failure = Failure::kCancelled;
        return false;
      }
      png_read_row(s->png, s->rows.data(), nullptr);
      GrowPixels(&s->out->pixels, (y + 1) * w * 3, h * w * 3);
      ToRgb(*s, layout, s->rows.data(), s->out->pixels.data() + y * w * 3);
    }
    return true;
  }
  s->rows.assign(row_bytes * h, 0);
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t y = 0; y < h; ++y) {
      if (y % 64 == 0 && (*s->cancelled)()) {
        s->failure = Failure::kCancelled;
        return false;
      }
      png_read_row(s->png, s->rows.data() + y * row_bytes, nullptr);
    }
  }
  s->out->pixels.resize(w * h * 3);
  for (size_t y = 0; y < h; ++y) {
    ToRgb(*s, layout, s->rows.data() + y * row_bytes, s->out->pixels.data() + y * w * 3);
  }
  return true;
}

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Whether the IDAT chunks present could inflate to the image's filtered rows: deflate expands
// at most 1032:1, so a file declaring more rows than its data can hold is truncated or corrupt,
// and is refused before its buffers exist (a 1 KB file may declare 60,000 x 60,000).
bool FitsImageData(std::span<const uint8_t> b, const PngState& s) {
  size_t idat = 0;
  size_t p = 8;
  while (b.size() - p >= 8) {
    const uint32_t len = Be32(&b[p]);
    if (std::memcmp(&b[p + 4], "IDAT", 4) == 0) idat += std::min<size_t>(len, b.size() - p - 8);
    if (std::memcmp(&b[p + 4], "IEND", 4) == 0 || len > b.size() - p - 8) break;
    if (b.size() - p - 8 - len < 4) break;
    p += 12 + static_cast<size_t>(len);
  }
  const int channels = s.color == PNG_COLOR_TYPE_RGB          ? 3
                       : s.color == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                       : s.color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                              : 1;
  const uint64_t bits = static_cast<uint64_t>(s.width) * static_cast<uint64_t>(channels) *
                        static_cast<uint64_t>(s.depth);
  // Filter byte + packed row; interlacing only adds bytes, so the plain size is a lower bound.
  const uint64_t raw = (1 + (bits + 7) / 8) * static_cast<uint64_t>(s.height);
  return raw <= uint64_t{1032} * idat + 1024;
}

// PIL's info["exif"]: an eXIf chunk ("Exif\0\0" + data) or a tEXt chunk keyed "exif"; the last
// one before IDAT, else (PIL loads the image to look further) the last one after it. A chunk
// after the image data that runs past the end makes PIL's load raise: DataLoss.
Status FindExif(std::span<const uint8_t> b, const std::string& label, Decoded* d) {
  std::vector<uint8_t> before;
  std::vector<uint8_t> after;
  bool have_before = false;
  bool have_after = false;
  bool seen_idat = false;
  size_t p = 8;
  while (b.size() - p >= 8) {
    const uint32_t len = Be32(&b[p]);
    const uint8_t* type = &b[p + 4];
    for (int i = 0; i < 4; ++i) {
      const auto c = static_cast<char>(type[i]);
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return Status::Ok();
    }
    if (std::memcmp(type, "IEND", 4) == 0) break;
    const bool idat = std::memcmp(type, "IDAT", 4) == 0;
    seen_idat = seen_idat || idat;
    if (len > b.size() - p - 8) {
      if (seen_idat && !idat) {
        return DataLoss(label + ": PNG chunk " +
                        std::string(reinterpret_cast<const char*>(type), 4) +
                        " after the image data is truncated");
      }
      break;
    }
    const std::span<const uint8_t> data = b.subspan(p + 8, len);
    std::vector<uint8_t> exif;
    bool found = false;
    if (std::memcmp(type, "eXIf", 4) == 0) {
      // "Exif\0\0" then the chunk (memcpy: GCC 12 misreads assign + insert as out of bounds).
      exif.resize(6 + data.size());
      std::memcpy(exif.data(), "Exif\0\0", 6);
      if (!data.empty()) std::memcpy(exif.data() + 6, data.data(), data.size());
      found = true;
    } else if (std::memcmp(type, "tEXt", 4) == 0 && len >= 5 &&
               std::memcmp(data.data(), "exif\0", 5) == 0) {
      exif.assign(data.begin() + 5, data.end());
      found = true;
    }
    if (found) {
      (seen_idat ? after : before) = std::move(exif);
      (seen_idat ? have_after : have_before) = true;
    }
    if (b.size() - p - 8 - len < 4) break;
    p += 12 + static_cast<size_t>(len);
  }
  if (have_before) {
    d->has_exif = true;
    d->exif = std::move(before);
  } else if (have_after) {
    d->has_exif = true;
    d->exif = std::move(after);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Decoded> DecodePng(std::span<const uint8_t> bytes, const std::string& label,
                            const DecodeLimits& limits, const DecodeHooks& hooks) {
  Decoded d;
  PngState s;
  s.data = bytes.data();
  s.size = bytes.size();
  s.limits = limits;
  s.out = &d.image;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, OnError, OnWarning);
  if (s.png == nullptr) return ResourceExhausted(label + ": libpng could not start");
  s.info = png_create_info_struct(s.png);
  if (s.info == nullptr) {
    png_destroy_read_struct(&s.png, nullptr, nullptr);
    return ResourceExhausted(label + ": libpng could not start");
  }
  s.cancelled = &hooks.cancelled;
  bool ok = false;
  Status admitted;
  try {
    ok = RunPngHeader(&s);
    if (ok && !FitsImageData(bytes, s)) {
      s.failure = Failure::kShortData;
      ok = false;
    }
    if (ok) {
      admitted = hooks.admit(s.width, s.height);
      ok = admitted.ok() && RunPngBody(&s);
    }
  } catch (const std::bad_alloc&) {
    png_destroy_read_struct(&s.png, &s.info, nullptr);
    return ResourceExhausted(label + ": out of memory for a " + std::to_string(s.width) + " x " +
                             std::to_string(s.height) + " PNG");
  }
  png_destroy_read_struct(&s.png, &s.info, nullptr);
  if (!admitted.ok()) return admitted;
  if (!ok) {
    switch (s.failure) {
      case Failure::kCancelled: return Cancelled(label + ": PNG decoding cancelled");
      case Failure::kShortData:
        return DataLoss(label + ": PNG data is truncated: " + std::to_string(bytes.size()) +
                        " bytes cannot hold the declared " + std::to_string(s.width) + " x " +
                        std::to_string(s.height) + " image");
      case Failure::kTruncated: return DataLoss(label + ": PNG data is truncated");
      case Failure::kSize: return CheckImageSize(s.width, s.height, limits, label, "PNG");
      default: return DataLoss(label + ": corrupt PNG: " + s.library_message);
    }
  }
  VLS_RETURN_IF_ERROR(FindExif(bytes, label, &d));
  return d;
}

}  // namespace vls::image::internal
