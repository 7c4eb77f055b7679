// Bounded work for untrusted images (issue 31): decompression bombs inside PIL's bound, files
// that declare a huge size their data cannot hold, JPEG DCT scaling, cancellation, and the
// process-wide DecodeBudget.
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "image/decode.h"
#include "image/decode_budget.h"

namespace vls::image {
namespace {

const std::string kDir = VLS_IMAGE_FIXTURES;

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void PutBe32(std::vector<uint8_t>* b, uint32_t v) {
  for (int i = 3; i >= 0; --i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void Chunk(std::vector<uint8_t>* png, const char* type, const std::vector<uint8_t>& data) {
  PutBe32(png, static_cast<uint32_t>(data.size()));
  const size_t start = png->size();
  png->insert(png->end(), type, type + 4);
  png->insert(png->end(), data.begin(), data.end());
  PutBe32(png, static_cast<uint32_t>(crc32(0, png->data() + start, png->size() - start)));
}

// A 1-bit grey PNG of side x side black pixels: the attack's 29 KB bomb at 13,377.
std::vector<uint8_t> BilevelPng(uint32_t side) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  PutBe32(&ihdr, side);
  PutBe32(&ihdr, side);
  ihdr.insert(ihdr.end(), {1, 0, 0, 0, 0});  // depth 1, grey, deflate, filter 0, no interlace
  Chunk(&png, "IHDR", ihdr);
  z_stream z{};
  EXPECT_EQ(deflateInit(&z, 9), Z_OK);
  const std::vector<uint8_t> row(1 + (side + 7) / 8, 0);  // filter byte 0, then zeros
  std::vector<uint8_t> idat(deflateBound(&z, row.size()) * 2 + (size_t{1} << 20));
  z.next_out = idat.data();
  z.avail_out = static_cast<uInt>(idat.size());
  for (uint32_t y = 0; y < side; ++y) {
    z.next_in = const_cast<Bytef*>(row.data());
    z.avail_in = static_cast<uInt>(row.size());
    EXPECT_EQ(deflate(&z, y + 1 == side ? Z_FINISH : Z_NO_FLUSH),
              y + 1 == side ? Z_STREAM_END : Z_OK);
  }
  idat.resize(z.total_out);
  deflateEnd(&z);
  Chunk(&png, "IDAT", idat);
  Chunk(&png, "IEND", {});
  return png;
}

// Peak resident memory (kB) since the last ResetPeak: /proc's VmHWM, reset through clear_refs
// (so an earlier test's peak cannot hide this one's).
void ResetPeak() { std::ofstream("/proc/self/clear_refs") << "5"; }
int64_t PeakKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}
int64_t RssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(ImageDecodeBounds, BilevelPngBombIsRefusedFromItsHeader) {
  const std::vector<uint8_t> bomb = BilevelPng(13377);
  EXPECT_LT(bomb.size(), size_t{64} << 10);  // ~29 KB for 179 M pixels
  ResetPeak();
  const int64_t before = RssKb();
  const auto start = std::chrono::steady_clock::now();
  auto r = DecodeImage(bomb, "bomb.png");
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_LT(PeakKb() - before, 32 << 10) << "decoding a refused bomb cost memory";
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "bomb.png: PNG image is 13377 x 13377 = 178944129 pixels, over the limit of 33554432 "
            "decoded pixels per image (kDefaultMaxDecodePixels)");
}

// A PNG that declares more rows than its image data could inflate to (deflate: at most
// 1032:1) is refused before any buffer of that size, even under a raised pixel limit.
TEST(ImageDecodeBounds, TruncatedPngDeclaringAHugeSizeCostsNothing) {
  std::vector<uint8_t> bomb = BilevelPng(13377);
  bomb.resize(2048);  // IHDR and the start of IDAT
  ResetPeak();
  const int64_t before = RssKb();
  auto r = DecodeImage(bomb, "cut.png", DecodeLimits{.max_pixels = kMaxImagePixels});
  EXPECT_LT(PeakKb() - before, 32 << 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("cut.png: PNG data is truncated: 2048 bytes cannot hold "
                                      "the declared 13377 x 13377 image"),
            std::string::npos)
      << r.status().ToString();
}

// The bomb decoded under PIL's own bound stops at the first poll after its caller went away.
TEST(ImageDecodeBounds, CancellationStopsADecodeBetweenRows) {
  const std::vector<uint8_t> bomb = BilevelPng(13377);
  int polls = 0;
  DecodeLimits limits{.max_pixels = kMaxImagePixels};
  limits.cancelled = [&polls]() { return ++polls > 200; };
  const auto start = std::chrono::steady_clock::now();
  auto r = DecodeImage(bomb, "bomb.png", limits);
  EXPECT_LT(SecondsSince(start), 2.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_EQ(polls, 201);  // stopped at the first true, ~200 rows in

  // The same through a thread's ScopedDecodeControl (how ChatPipeline passes it down).
  std::atomic<bool> gone{true};
  {
    ScopedDecodeControl control([&gone]() { return gone.load(); });
    r = DecodeImage(ReadBytes(kDir + "/png_rgb.png"), "x.png");
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  }
  EXPECT_TRUE(DecodeImage(ReadBytes(kDir + "/png_rgb.png"), "x.png").ok());  // scope ended
}

std::vector<uint8_t> WithJpegSize(std::vector<uint8_t> jpeg, int width, int height) {
  size_t sof = 2;
  while (!(jpeg[sof] == 0xff && (jpeg[sof + 1] == 0xc0 || jpeg[sof + 1] == 0xc2)))
    sof += 2 + ((jpeg[sof + 2] << 8) | jpeg[sof + 3]);
  jpeg[sof + 5] = static_cast<uint8_t>(height >> 8);
  jpeg[sof + 6] = static_cast<uint8_t>(height);
  jpeg[sof + 7] = static_cast<uint8_t>(width >> 8);
  jpeg[sof + 8] = static_cast<uint8_t>(width);
  return jpeg;
}

// The attack's 633-byte JPEG declaring 13,000 x 13,000: refused without a large allocation
// (it once cost 490 MB), baseline and progressive.
TEST(ImageDecodeBounds, TruncatedJpegDeclaringAHugeSizeCostsLittle) {
  for (const char* name : {"jpeg_420.jpg", "jpeg_progressive.jpg"}) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> jpeg = WithJpegSize(ReadBytes(kDir + "/" + name), 13000, 13000);
    jpeg.resize(std::min<size_t>(jpeg.size(), 633));
    ResetPeak();
    const int64_t before = RssKb();
    const auto start = std::chrono::steady_clock::now();
    auto r = DecodeImage(jpeg, "cut.jpg", DecodeLimits{.max_pixels = kMaxImagePixels});
    EXPECT_LT(SecondsSince(start), 1.0);
    EXPECT_LT(PeakKb() - before, 48 << 10) << "kB";
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_EQ(r.status().message().rfind("cut.jpg: JPEG data is truncated", 0), 0u)
        << r.status().ToString();
  }
}

// Over the per-image limit a JPEG decodes at the largest DCT scale that fits: about the 2 x 2
// mean of the full decode, at ceil(W/2) x ceil(H/2).
TEST(ImageDecodeBounds, BigJpegDecodesAtAReducedDctScale) {
  const std::vector<uint8_t> jpeg = ReadBytes(kDir + "/jpeg_444.jpg");
  auto full = DecodeImage(jpeg, "photo.jpg");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const int w = full->width;
  const int h = full->height;
  auto half = DecodeImage(jpeg, "photo.jpg", DecodeLimits{.max_pixels = int64_t{w} * h - 1});
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_EQ(half->width, (w + 1) / 2);
  EXPECT_EQ(half->height, (h + 1) / 2);
  double diff = 0;
  int n = 0;
  for (int y = 0; y + 1 < h; y += 2) {
    for (int x = 0; x + 1 < w; x += 2) {
      for (int c = 0; c < 3; ++c) {
        const int mean = (full->At(y, x, c) + full->At(y, x + 1, c) + full->At(y + 1, x, c) +
                          full->At(y + 1, x + 1, c) + 2) /
                         4;
        diff += std::abs(mean - half->At(y / 2, x / 2, c));
        ++n;
      }
    }
  }
  EXPECT_LT(diff / n, 6.0);
  // 1/8 is the smallest scale; below it, and with scaling off, the image is refused.
  auto eighth = DecodeImage(jpeg, "photo.jpg",
                            DecodeLimits{.max_pixels = int64_t{(w + 7) / 8} * ((h + 7) / 8)});
  ASSERT_TRUE(eighth.ok());
  EXPECT_EQ(eighth->width, (w + 7) / 8);
  auto none = DecodeImage(jpeg, "photo.jpg",
                          DecodeLimits{.max_pixels = int64_t{(w + 7) / 8} * ((h + 7) / 8) - 1});
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("even decoded at 1/8 scale"), std::string::npos)
      << none.status().ToString();
  DecodeLimits off{.max_pixels = int64_t{w} * h - 1};
  off.allow_jpeg_scaling = false;
  EXPECT_EQ(DecodeImage(jpeg, "photo.jpg", off).status().code(), StatusCode::kInvalidArgument);
}

TEST(ImageDecodeBounds, RequestBudgetCoversEveryImageOfTheRequest) {
  const std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");  // 37 x 23
  ScopedDecodeControl control(nullptr, 37 * 23 * 2);
  EXPECT_TRUE(DecodeImage(png, "a.png").ok());
  EXPECT_TRUE(DecodeImage(png, "b.png").ok());
  auto r = DecodeImage(png, "c.png");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("c.png: decodes to 851 pixels, over what is left of the "
                                      "request's limit of 1702"),
            std::string::npos)
      << r.status().ToString();
}

TEST(DecodeBudget, BoundsDecodesInFlightAndWaitsWithATimeout) {
  DecodeBudget budget(DecodeBudgetOptions{
      .max_decodes = 2, .max_pixels = 1000, .wait = std::chrono::milliseconds(100)});
  auto a = budget.Acquire(600, "a");
  ASSERT_TRUE(a.ok());
  // Does not fit the pixels: waits, then ResourceExhausted naming the image.
  auto start = std::chrono::steady_clock::now();
  auto b = budget.Acquire(600, "b.png");
  EXPECT_GE(SecondsSince(start), 0.09);
  ASSERT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b.status().message().rfind("b.png: the server is busy decoding", 0), 0u);
  // A cancelled caller stops waiting at once.
  start = std::chrono::steady_clock::now();
  auto c = budget.Acquire(600, "c", [] { return true; });
  EXPECT_EQ(c.status().code(), StatusCode::kCancelled);
  EXPECT_LT(SecondsSince(start), 0.09);
  // Room comes back when a lease ends: a waiter is woken.
  std::thread release([&a] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    a->Release();
  });
  auto d = budget.Acquire(600, "d");
  release.join();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(budget.usage().pixels, 600);
  // The decode count bounds too; an image larger than the whole budget goes alone.
  auto e = budget.Acquire(10, "e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(budget.Acquire(1, "f").status().code(), StatusCode::kResourceExhausted);
  *d = DecodeBudget::Lease();
  *e = DecodeBudget::Lease();
  EXPECT_EQ(budget.usage().decodes, 0);
  EXPECT_TRUE(budget.Acquire(5000, "huge").ok());
}

TEST(DecodeBudget, DecodeImageTakesItsLeaseFromTheBudget) {
  DecodeBudget budget(DecodeBudgetOptions{
      .max_decodes = 1, .max_pixels = 1 << 20, .wait = std::chrono::milliseconds(50)});
  const std::vector<uint8_t> png = ReadBytes(kDir + "/png_rgb.png");
  DecodeLimits limits;
  limits.budget = &budget;
  auto held = budget.Acquire(1, "other");
  ASSERT_TRUE(held.ok());
  auto r = DecodeImage(png, "x.png", limits);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  held->Release();
  EXPECT_TRUE(DecodeImage(png, "x.png", limits).ok());
  EXPECT_EQ(budget.usage().decodes, 0);  // returned when the decode ended
}

}  // namespace
}  // namespace vls::image
