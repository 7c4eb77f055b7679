// EXIF orientation exactly as Pillow 9.4 reads it (Image.Exif.load -> TiffImagePlugin's
// ImageFileDirectory_v2.load), and the transposes of ImageOps.exif_transpose.
//
// PIL's reading, which this mirrors rule for rule (tests/image/ pins each against PIL):
//   * "Exif\0\0" is stripped; an empty block has no tags.
//   * The first 4 bytes must be one of PIL's TIFF prefixes (else SyntaxError), the header must
//     hold 8 bytes (else struct.error), BigTIFF's 8-byte offset is never there (struct.error).
//   * IFD0 is read entry by entry; reading past the block (the count, an entry, an entry's
//     out-of-line data) ends the directory, keeping the entries read so far. Entries of an
//     unknown type or with no data are skipped. A later 0x0112 replaces an earlier one.
//   * The value is the first element (PIL coerces the one-element Orientation tag) and it is
//     compared to 2..8 as Python compares numbers: SHORT 6, LONG 6, FLOAT 6.0 and RATIONAL 12/2
//     all rotate; BYTE, ASCII and UNDEFINED values are bytes/str and never do.
#include <cmath>
#include <cstring>
#include <string>

#include "image/codecs.h"

namespace vls::image::internal {
namespace {

constexpr uint16_t kOrientationTag = 0x0112;

// The element size of each TIFF type PIL can load (0: a type PIL skips).
size_t TypeSize(uint16_t type) {
  switch (type) {
    case 1:
    case 2:
    case 6:
    case 7: return 1;  // BYTE ASCII SBYTE UNDEFINED
    case 3:
    case 8: return 2;  // SHORT SSHORT
    case 4:
    case 9:
    case 11:
    case 13: return 4;  // LONG SLONG FLOAT IFD
    case 5:
    case 10:
    case 12:
    case 16: return 8;  // RATIONAL SRATIONAL DOUBLE LONG8
    default: return 0;
  }
}

class Reader {
 public:
  Reader(std::span<const uint8_t> data, bool little) : data_(data), little_(little) {}
  bool Has(uint64_t offset, uint64_t n) const {
    return offset <= data_.size() && n <= data_.size() - offset;
  }
  // REQUIRES: Has(offset, n), n <= 8.
  uint64_t U(uint64_t offset, int n) const {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t byte = data_[offset + static_cast<uint64_t>(little_ ? n - 1 - i : i)];
      v = (v << 8) | byte;
    }
    return v;
  }

 private:
  std::span<const uint8_t> data_;
  bool little_;
};

// Python's `value == k` for the first element of a tag of `type` at `p`, for k in 2..8;
// returns the k or 0.
int MatchOrientation(const Reader& r, uint64_t p, uint16_t type) {
  double v = 0;
  switch (type) {
    case 3: v = static_cast<double>(r.U(p, 2)); break;
    case 4:
    case 13: v = static_cast<double>(r.U(p, 4)); break;
    case 16: {
      const uint64_t u = r.U(p, 8);
      return u >= 2 && u <= 8 ? static_cast<int>(u) : 0;
    }
    case 6: v = static_cast<int8_t>(r.U(p, 1)); break;
    case 8: v = static_cast<int16_t>(r.U(p, 2)); break;
    case 9: v = static_cast<int32_t>(r.U(p, 4)); break;
    case 11: {
      const auto bits = static_cast<uint32_t>(r.U(p, 4));
      float f = 0;
      std::memcpy(&f, &bits, sizeof f);
      v = f;
      break;
    }
    case 12: {
      const uint64_t bits = r.U(p, 8);
      std::memcpy(&v, &bits, sizeof v);
      break;
    }
    case 5:
    case 10: {  // Fraction(num, den) == k exactly; den 0 is NaN
      int64_t num = static_cast<int64_t>(r.U(p, 4));
      int64_t den = static_cast<int64_t>(r.U(p + 4, 4));
      if (type == 10) {
        num = static_cast<int32_t>(num);
        den = static_cast<int32_t>(den);
      }
      if (den == 0) return 0;
      for (int k = 2; k <= 8; ++k) {
        if (num == k * den) return k;
      }
      return 0;
    }
    default: return 0;  // bytes or str in PIL: never equal to an int
  }
  for (int k = 2; k <= 8; ++k) {
    if (v == k) return k;
  }
  return 0;
}

std::string HexPrefix(std::span<const uint8_t> d) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < d.size() && i < 8; ++i) {
    s += kHex[d[i] >> 4];
    s += kHex[d[i] & 15];
  }
  return s;
}

}  // namespace

StatusOr<int> ExifOrientation(std::span<const uint8_t> exif, bool ignore_bad_prefix,
                              const std::string& label) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
  if (exif.empty()) return 1;
  static const char* const kPrefixes[] = {"MM\x00\x2a", "II\x2a\x00", "MM\x2a\x00",
                                          "II\x00\x2a", "MM\x00\x2b", "II\x2b\x00"};
  bool known = false;
  for (const char* p : kPrefixes)
    known = known || (exif.size() >= 4 && std::memcmp(exif.data(), p, 4) == 0);
  if (!known) {
    if (ignore_bad_prefix) return 1;
    return DataLoss(label + ": EXIF block is not TIFF data (starts with hex " + HexPrefix(exif) +
                    ")");
  }
  const bool little = exif[0] == 'I';
  if (exif[2] == 0x2b || exif.size() < 8) {
    return DataLoss(
        label + ": EXIF TIFF header is " +
        (exif[2] == 0x2b ? std::string("BigTIFF (unreadable as EXIF)") : "shorter than 8 bytes"));
  }
  const Reader r(exif, little);
  uint64_t p = r.U(4, 4);  // IFD0
  if (!r.Has(p, 2)) return 1;
  const uint64_t count = r.U(p, 2);
  p += 2;
  int orientation = 1;
  for (uint64_t i = 0; i < count; ++i, p += 12) {
    if (!r.Has(p, 12)) break;
    const auto tag = static_cast<uint16_t>(r.U(p, 2));
    const auto type = static_cast<uint16_t>(r.U(p + 2, 2));
    const uint64_t n = r.U(p + 4, 4);
    const size_t unit = TypeSize(type);
    if (unit == 0) continue;
    const uint64_t size = n * unit;  // n < 2^32, unit <= 8: no overflow
    uint64_t at = p + 8;
    if (size > 4) {
      at = r.U(p + 8, 4);
      if (!r.Has(at, size)) break;  // PIL: "Truncated File Read" ends the directory
    }
    if (size == 0) continue;
    if (tag == kOrientationTag) {
      const int k = MatchOrientation(r, at, type);
      orientation = k == 0 ? 1 : k;
    }
  }
  return orientation;
}

RgbImage ApplyOrientation(RgbImage in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const size_t w = static_cast<size_t>(in.width);
  const size_t h = static_cast<size_t>(in.height);
  const bool swap = orientation >= 5;
  RgbImage out;
  out.width = swap ? in.height : in.width;
  out.height = swap ? in.width : in.height;
  out.pixels.resize(w * h * 3);
  const size_t ow = static_cast<size_t>(out.width);
  const size_t oh = static_cast<size_t>(out.height);
  for (size_t y = 0; y < oh; ++y) {
    uint8_t* dst = out.pixels.data() + y * ow * 3;
    for (size_t x = 0; x < ow; ++x) {
      size_t sy = 0;
      size_t sx = 0;
      switch (orientation) {
        case 2:
          sy = y;
          sx = w - 1 - x;
          break;  // FLIP_LEFT_RIGHT
        case 3:
          sy = h - 1 - y;
          sx = w - 1 - x;
          break;  // ROTATE_180
        case 4:
          sy = h - 1 - y;
          sx = x;
          break;  // FLIP_TOP_BOTTOM
        case 5:
          sy = x;
          sx = y;
          break;  // TRANSPOSE
        case 6:
          sy = h - 1 - x;
          sx = y;
          break;  // ROTATE_270
        case 7:
          sy = h - 1 - x;
          sx = w - 1 - y;
          break;  // TRANSVERSE
        default:
          sy = x;
          sx = w - 1 - y;
          break;  // 8: ROTATE_90
      }
      const uint8_t* src = in.pixels.data() + (sy * w + sx) * 3;
      dst[x * 3 + 0] = src[0];
      dst[x * 3 + 1] = src[1];
      dst[x * 3 + 2] = src[2];
    }
  }
  return out;
}

}  // namespace vls::image::internal
