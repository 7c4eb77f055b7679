// DecodeImage against PIL (tests/image/fixtures: the files and PIL's load_image pixels, made by
// tests/image/make_fixtures.py), and against corrupt, truncated, oversized and foreign input.
#include "image/decode.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "image/codecs.h"

namespace vls::image {
namespace {

const std::string kDir = VLS_IMAGE_FIXTURES;

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Fixture {
  std::string name;
  bool ok = false;
};

std::vector<Fixture> Manifest() {
  std::ifstream in(kDir + "/manifest.txt");
  std::vector<Fixture> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    Fixture f;
    std::string verdict;
    ls >> f.name >> verdict;
    f.ok = verdict == "ok";
    out.push_back(f);
  }
  return out;
}

std::string Stem(const std::string& name) { return name.substr(0, name.rfind('.')); }

TEST(ImageDecodeTest, EveryFixtureIsPilByteForByte) {
  const std::vector<Fixture> fixtures = Manifest();
  ASSERT_GE(fixtures.size(), 40U);
  int compared = 0;
  for (const Fixture& f : fixtures) {
    SCOPED_TRACE(f.name);
    auto img = LoadImageFile(kDir + "/" + f.name);
    if (!f.ok) {
      ASSERT_FALSE(img.ok());
      EXPECT_NE(img.status().message().find(f.name), std::string::npos);
      EXPECT_NE(img.status().message().find("EXIF"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    const std::vector<uint8_t> want = ReadBytes(kDir + "/" + Stem(f.name) + ".rgb");
    ASSERT_GE(want.size(), 8U);
    uint32_t w = 0;
    uint32_t h = 0;
    std::memcpy(&w, want.data(), 4);
    std::memcpy(&h, want.data() + 4, 4);
    ASSERT_EQ(img->width, static_cast<int>(w));
    ASSERT_EQ(img->height, static_cast<int>(h));
    ASSERT_EQ(img->pixels.size() + 8, want.size());
    size_t first_diff = img->pixels.size();
    for (size_t i = 0; i < img->pixels.size(); ++i) {
      if (img->pixels[i] != want[8 + i]) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, img->pixels.size())
        << "first differing byte " << first_diff << ": " << int{img->pixels[first_diff]}
        << " vs PIL " << int{want[8 + first_diff]};
    ++compared;
  }
  EXPECT_GE(compared, 40);
}

TEST(ImageDecodeTest, SniffsByMagicNotName) {
  const std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");
  auto img = DecodeImage(png, "looks_like.jpg");
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->width, 37);
  EXPECT_EQ(*SniffImageFormat(png, "x"), ImageFormat::kPng);
  EXPECT_EQ(*SniffImageFormat(ReadBytes(kDir + "/jpeg_420.jpg"), "x"), ImageFormat::kJpeg);
  EXPECT_EQ(*SniffImageFormat(ReadBytes(kDir + "/webp_lossy.webp"), "x"), ImageFormat::kWebp);
}

StatusOr<RgbImage> DecodeString(const std::string& s, const std::string& label) {
  return DecodeImage(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()),
                     label);
}

TEST(ImageDecodeTest, RefusesForeignFormatsNamingThem) {
  struct Case {
    std::string bytes;
    StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"", StatusCode::kInvalidArgument, "empty"},
      {"GIF89a\x01\x00\x01\x00", StatusCode::kUnimplemented, "GIF"},
      {std::string("BM\x3a\0\0\0", 6), StatusCode::kUnimplemented, "BMP"},
      {std::string("II*\0\x08\0\0\0", 8), StatusCode::kUnimplemented, "TIFF"},
      {std::string("\0\0\0\x1c"
                   "ftypavif",
                   12),
       StatusCode::kUnimplemented, "AVIF"},
      {std::string("\0\0\0\x18"
                   "ftypheic",
                   12),
       StatusCode::kUnimplemented, "HEIF"},
      {"<?xml version=\"1.0\"?><svg/>", StatusCode::kUnimplemented, "SVG"},
      {"  <svg xmlns=", StatusCode::kUnimplemented, "SVG"},
      {"RIFF\x10\0\0\0WAVEfmt ", StatusCode::kUnimplemented, "RIFF"},
      {"hello, this is text", StatusCode::kInvalidArgument, "starts with \"hello, this"},
      {std::string("\xff\xd8", 2), StatusCode::kInvalidArgument, "not a JPEG, PNG or WebP"},
  };
  for (const Case& c : cases) {
    auto r = DecodeString(c.bytes, "in.img");
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_EQ(r.status().message().rfind("in.img: ", 0), 0U) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().ToString();
  }
}

// Every prefix of every format's fixtures is refused (never a crash, never a partial image),
// naming the label; PNG cut inside IEND is the one exception PIL makes too.
TEST(ImageDecodeTest, TruncationAtManyLengthsIsRefused) {
  for (const char* name : {"jpeg_420.jpg", "jpeg_progressive.jpg", "jpeg_cmyk.jpg", "png_rgb.png",
                           "png_rgb_interlaced.png", "png_palette2_short.png", "webp_lossy.webp",
                           "webp_lossless_alpha.webp", "webp_animated.webp"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> full = ReadBytes(kDir + "/" + name);
    const bool png = full[1] == 'P';
    const size_t keep_ok = png ? 12 : 0;  // PNG: the IEND chunk is not needed (as PIL)
    int refused = 0;
    for (size_t n = 0; n + keep_ok < full.size(); n += (n < 200 ? 1 : 7)) {
      auto r = DecodeImage(std::span<const uint8_t>(full.data(), n), "cut.img");
      ASSERT_FALSE(r.ok()) << n << " of " << full.size();
      EXPECT_EQ(r.status().message().rfind("cut.img: ", 0), 0U) << r.status().ToString();
      ++refused;
    }
    EXPECT_GT(refused, 100);
  }
  const std::vector<uint8_t> jpeg = ReadBytes(kDir + "/jpeg_420.jpg");
  auto r = DecodeImage(std::span<const uint8_t>(jpeg.data(), jpeg.size() / 2), "photo.jpg");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), "photo.jpg: JPEG data is truncated");
  // PIL refuses a JPEG that lacks only the last byte of its EOI marker; so do we. Bytes after
  // the EOI are ignored by both.
  r = DecodeImage(std::span<const uint8_t>(jpeg.data(), jpeg.size() - 1), "photo.jpg");
  EXPECT_EQ(r.status().message(), "photo.jpg: JPEG data is truncated");
  std::vector<uint8_t> trailing = jpeg;
  trailing.insert(trailing.end(), {'j', 'u', 'n', 'k'});
  EXPECT_TRUE(DecodeImage(trailing, "x").ok());
  // A PNG without IEND decodes in PIL (it stops after the image data): here too.
  const std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");
  EXPECT_TRUE(DecodeImage(std::span<const uint8_t>(png.data(), png.size() - 12), "x").ok());
}

TEST(ImageDecodeTest, BitFlipsGiveAnImageOrAnErrorNamingTheLabel) {
  for (const char* name : {"jpeg_444.jpg", "jpeg_progressive.jpg", "png_rgba16_interlaced.png",
                           "png_palette.png", "webp_lossy_alpha.webp", "webp_lossless.webp"}) {
    const std::vector<uint8_t> full = ReadBytes(kDir + "/" + name);
    int refused = 0;
    for (size_t i = 0; i < full.size(); i += 3) {
      std::vector<uint8_t> b = full;
      b[i] ^= static_cast<uint8_t>(1U << (i % 8));
      auto r = DecodeImage(b, "flip.img");
      if (r.ok()) {
        EXPECT_EQ(r->pixels.size(), static_cast<size_t>(r->width) * r->height * 3);
      } else {
        EXPECT_EQ(r.status().message().rfind("flip.img: ", 0), 0U) << r.status().ToString();
        ++refused;
      }
    }
    EXPECT_GT(refused, 0) << name;
  }
  // A flipped bit in IDAT is a CRC error (PIL does not check IDAT's CRC; libpng does).
  std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");
  png[png.size() - 13] ^= 1;  // the last byte of IDAT's CRC (IEND is the last 12 bytes)
  auto r = DecodeImage(png, "x.png");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("CRC"), std::string::npos) << r.status().ToString();
}

// Sets big-endian `v` (n bytes) at b[at].
void PutBe(std::vector<uint8_t>* b, size_t at, uint32_t v, int n) {
  for (int i = 0; i < n; ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (8 * (n - 1 - i)));
}

uint32_t Crc(const uint8_t* p, size_t n) {  // the PNG CRC-32
  uint32_t c = 0xffffffffU;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320U & (0U - (c & 1U)));
  }
  return c ^ 0xffffffffU;
}

// A 100000 x 100000 header in each format is refused from the header, quickly.
TEST(ImageDecodeTest, DecompressionBombRefusedFromTheHeader) {
  std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");
  PutBe(&png, 16, 100000, 4);
  PutBe(&png, 20, 100000, 4);
  PutBe(&png, 29, Crc(&png[12], 17), 4);
  std::vector<uint8_t> jpeg = ReadBytes(kDir + "/jpeg_420.jpg");
  size_t sof = 2;
  while (!(jpeg[sof] == 0xff && jpeg[sof + 1] == 0xc0))
    sof += 2 + ((jpeg[sof + 2] << 8) | jpeg[sof + 3]);
  PutBe(&jpeg, sof + 5, 60000, 2);                                      // height
  PutBe(&jpeg, sof + 7, 60000, 2);                                      // width: 3.6e9 pixels
  std::vector<uint8_t> webp = ReadBytes(kDir + "/webp_animated.webp");  // VP8X canvas
  ASSERT_EQ(std::memcmp(&webp[12], "VP8X", 4), 0);
  for (size_t at : {24, 27}) {  // canvas 16384 x 16384 (WebP's largest): 2.7e8 pixels
    webp[at] = 0xff;
    webp[at + 1] = 0x3f;
    webp[at + 2] = 0;
  }
  for (auto* b : {&png, &jpeg, &webp}) {
    const auto start = std::chrono::steady_clock::now();
    auto r = DecodeImage(*b, "bomb.img");
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(r.ok());
    // A side over 65535 is OutOfRange; too many pixels InvalidArgument.
    EXPECT_EQ(r.status().code(), b == &png ? StatusCode::kOutOfRange : StatusCode::kInvalidArgument)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("bomb.img: "), std::string::npos);
    EXPECT_NE(r.status().message().find(b == &png ? "kMaxImageSide" : "kDefaultMaxDecodePixels"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_LT(s, 0.5);
  }
  // Tighter limits apply to a real image; the side bound too.
  const std::vector<uint8_t> ok = ReadBytes(kDir + "/png_rgb.png");
  auto r = DecodeImage(ok, "small.png", DecodeLimits{.max_pixels = 37 * 23 - 1});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = DecodeImage(ok, "small.png", DecodeLimits{.max_side = 36});
  EXPECT_NE(r.status().message().find("kMaxImageSide"), std::string::npos);
  EXPECT_TRUE(DecodeImage(ok, "small.png", DecodeLimits{.max_pixels = 37 * 23}).ok());
  r = DecodeImage(ok, "big.png", DecodeLimits{.max_file_bytes = ok.size() - 1});
  EXPECT_NE(r.status().message().find("kMaxImageFileBytes"), std::string::npos);
}

TEST(ImageDecodeTest, ZeroSizedImagesAreRefused) {
  std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");
  PutBe(&png, 16, 0, 4);
  PutBe(&png, 29, Crc(&png[12], 17), 4);
  auto r = DecodeImage(png, "zero.png");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("zero.png: ", 0), 0U) << r.status().ToString();
}

TEST(ImageDecodeTest, LoadImageFileErrors) {
  auto r = LoadImageFile(kDir + "/no_such_file.png");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::vector<uint8_t> ok = ReadBytes(kDir + "/webp_lossy.webp");
  r = LoadImageFile(kDir + "/webp_lossy.webp", DecodeLimits{.max_file_bytes = ok.size() - 1});
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

// The EXIF reader against cases pinned in PIL 9.4 (tests/image/check_fixtures.py reruns them).
std::vector<uint8_t> Ifd(uint16_t type, uint32_t count, std::vector<uint8_t> value,
                         std::vector<uint8_t> tail = {}) {
  std::vector<uint8_t> b = {'I', 'I', 0x2a, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01};
  b.push_back(static_cast<uint8_t>(type));
  b.push_back(static_cast<uint8_t>(type >> 8));
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(count >> (8 * i)));
  value.resize(4);
  b.insert(b.end(), value.begin(), value.end());
  b.insert(b.end(), {0, 0, 0, 0});
  b.insert(b.end(), tail.begin(), tail.end());
  return b;
}

TEST(ImageDecodeTest, ExifOrientationFollowsPil) {
  using internal::ExifOrientation;
  EXPECT_EQ(*ExifOrientation(Ifd(3, 1, {6}), false, "x"), 6);        // SHORT
  EXPECT_EQ(*ExifOrientation(Ifd(4, 1, {6}), false, "x"), 6);        // LONG
  EXPECT_EQ(*ExifOrientation(Ifd(1, 1, {6}), false, "x"), 1);        // BYTE: bytes in PIL
  EXPECT_EQ(*ExifOrientation(Ifd(7, 1, {6}), false, "x"), 1);        // UNDEFINED
  EXPECT_EQ(*ExifOrientation(Ifd(2, 2, {'6'}), false, "x"), 1);      // ASCII
  EXPECT_EQ(*ExifOrientation(Ifd(3, 2, {6, 0, 6}), false, "x"), 6);  // first of two
  EXPECT_EQ(*ExifOrientation(Ifd(3, 0, {6}), false, "x"), 1);        // no data
  EXPECT_EQ(*ExifOrientation(Ifd(3, 1, {9}), false, "x"), 1);        // not 2..8
  EXPECT_EQ(*ExifOrientation(Ifd(99, 1, {6}), false, "x"), 1);       // unknown type: skipped
  EXPECT_EQ(*ExifOrientation(Ifd(5, 1, {26}, {12, 0, 0, 0, 2, 0, 0, 0}), false, "x"), 6);
  EXPECT_EQ(*ExifOrientation(Ifd(5, 1, {26}, {6, 0, 0, 0, 0, 0, 0, 0}), false, "x"), 1);
  EXPECT_EQ(*ExifOrientation(Ifd(11, 1, {0, 0, 0xc0, 0x40}), false, "x"), 6);  // 6.0f
  EXPECT_EQ(*ExifOrientation(Ifd(11, 1, {0, 0, 0xb0, 0x40}), false, "x"), 1);  // 5.5f
  EXPECT_EQ(*ExifOrientation(Ifd(4, 2, {100}), false, "x"), 1);                // data past the end
  std::vector<uint8_t> prefixed = {'E', 'x', 'i', 'f', 0, 0};
  const std::vector<uint8_t> body = Ifd(3, 1, {3});
  prefixed.insert(prefixed.end(), body.begin(), body.end());
  EXPECT_EQ(*ExifOrientation(prefixed, false, "x"), 3);
  EXPECT_EQ(*ExifOrientation({}, false, "x"), 1);
  const std::vector<uint8_t> junk = {'j', 'u', 'n', 'k', 'j', 'u', 'n', 'k'};
  EXPECT_EQ(ExifOrientation(junk, false, "pic.jpg").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(*ExifOrientation(junk, true, "pic.jpg"), 1);
  const std::vector<uint8_t> short_head = {'I', 'I', 0x2a, 0, 8};
  EXPECT_FALSE(ExifOrientation(short_head, true, "x").ok());
  const std::vector<uint8_t> bad_ifd = {'I', 'I', 0x2a, 0, 0xff, 0, 0, 0};
  EXPECT_EQ(*ExifOrientation(bad_ifd, false, "x"), 1);
}

}  // namespace
}  // namespace vls::image
