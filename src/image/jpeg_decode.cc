// JPEG through libjpeg-turbo with the settings Pillow 9.4's JpegDecode.c uses (ISLOW DCT, fancy
// upsampling, no scaling), so the pixels are PIL's byte for byte. The one departure: an image
// over DecodeLimits::max_pixels decodes at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling), the
// largest that fits, where PIL would decode it whole (and the preprocessor shrink it).
//
// libjpeg reports errors by calling error_exit, which must not return: ours longjmps back to
// RunJpegHeader or RunJpegBody. Nothing with a destructor lives in their frames or in the libjpeg
// frames a longjmp skips; the state it writes is in a JpegState owned by the caller.
#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "image/codecs.h"

// After <cstdio>: jpeglib.h uses size_t and FILE without including their headers.
#include <jerror.h>
#include <jpeglib.h>

namespace vls::image::internal {
namespace {

// Progressive scans beyond this are refused: each rereads the whole coefficient buffer, so a
// few KB of scan headers could cost minutes (real encoders write about 10).
constexpr int kMaxJpegScans = 1000;

enum class Failure {
  kNone,
  kLibrary,
  kTruncated,
  kTooManyScans,
  kSize,
  kComponents,
  kShortData,
  kCoefficients,
  kCancelled
};

struct JpegState {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  Failure failure = Failure::kNone;
  char message[JMSG_LENGTH_MAX] = {};
  bool rows_done = false;    // all scanlines read: a missing EOI is no longer an error (as PIL)
  std::vector<uint8_t> row;  // one decoded row (grey or CMYK)
  // Filled from the EXIF scan and the header.
  DecodeLimits limits;
  int width = 0;
  int height = 0;
  int components = 0;
  int scale_denom = 1;  // 1, 2, 4 or 8
  int out_width = 0;    // after scaling
  int out_height = 0;
  int64_t min_bytes = 0;   // kShortData: the least the declared size needs
  int64_t coef_bytes = 0;  // kCoefficients: what a progressive file buffers
  RgbImage* out = nullptr;
  const std::function<bool()>* cancelled = nullptr;
};

JpegState* StateOf(j_common_ptr cinfo) { return reinterpret_cast<JpegState*>(cinfo->client_data); }

[[noreturn]] void OnError(j_common_ptr cinfo) {
  JpegState* s = StateOf(cinfo);
  cinfo->err->format_message(cinfo, s->message);
  if (s->failure == Failure::kNone) s->failure = Failure::kLibrary;
  std::longjmp(s->jump, 1);
}

// Warnings (msg_level -1) are dropped as PIL drops them (corrupt entropy data decodes to what
// libjpeg recovers), except running out of data, even for the EOI marker alone: PIL raises
// "image file is truncated" there. Trace messages (level >= 0) are dropped.
void OnMessage(j_common_ptr cinfo, int msg_level) {
  JpegState* s = StateOf(cinfo);
  if (msg_level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    s->failure = Failure::kTruncated;
    std::longjmp(s->jump, 1);
  }
}

// Also where a progressive file's scans are absorbed (jpeg_start_decompress): a client that went
// away stops it there too.
void OnProgress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  JpegState* s = StateOf(cinfo);
  if (d->is_decompressor && d->input_scan_number > kMaxJpegScans) {
    s->failure = Failure::kTooManyScans;
    std::longjmp(s->jump, 1);
  }
  if (s->cancelled != nullptr && *s->cancelled && (*s->cancelled)()) {
    s->failure = Failure::kCancelled;
    std::longjmp(s->jump, 1);
  }
}

// PIL's CMYK;I unpacker inverts each byte, then cmyk2rgb computes nk - MULDIV255(c, nk).
uint8_t CmykChannel(uint8_t raw_c, uint8_t raw_k) {
  const int c = 255 - raw_c;
  const int nk = raw_k;  // 255 - (255 - raw_k)
  const int t = c * nk + 128;
  return static_cast<uint8_t>(nk - (((t >> 8) + t) >> 8));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The header: size, scale, components. Everything here and in RunJpegBody can longjmp; returns
// false with s->failure set.
bool RunJpegHeader(JpegState* s, const uint8_t* data, size_t size) {
  j_decompress_ptr cinfo = &s->cinfo;
  if (setjmp(s->jump) != 0) return false;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));  // NOLINT(google-runtime-int)
  jpeg_read_header(cinfo, TRUE);
  s->width = static_cast<int>(cinfo->image_width);
  s->height = static_cast<int>(cinfo->image_height);
  s->components = cinfo->num_components;
  const int64_t w = s->width;
  const int64_t h = s->height;
  if (w < 1 || h < 1 || w > s->limits.max_side || h > s->limits.max_side) {
    s->failure = Failure::kSize;
    return false;
  }
  s->scale_denom = 0;
  for (const int d : {1, 2, 4, 8}) {
    if (d > 1 && !s->limits.allow_jpeg_scaling) break;
    if (CeilDiv(w, d) * CeilDiv(h, d) <= s->limits.max_pixels) {
      s->scale_denom = d;
      break;
    }
  }
  if (s->scale_denom == 0) {
    s->failure = Failure::kSize;
    return false;
  }
  switch (s->components) {
    case 1: cinfo->out_color_space = JCS_GRAYSCALE; break;
    case 3: cinfo->out_color_space = JCS_RGB; break;
    case 4: cinfo->out_color_space = JCS_CMYK; break;
    default: s->failure = Failure::kComponents; return false;
  }
  // Huffman-coded data holds at least one bit for each block of the first scan's components
  // (its DC difference; a progressive file must begin each component with a DC scan, where
  // end-of-band runs do not apply), so a file shorter than the smallest component's blocks / 8
  // bytes is truncated or corrupt: libjpeg would fill the missing scans with zeros over the
  // whole declared size (PIL does, for a 633-byte file declaring 13,000 x 13,000: 490 MB).
  // Arithmetic coding (under a bit a block) is exempt; its output grows row by row anyway.
  int64_t min_blocks = -1;
  int64_t coef_blocks = 0;
  for (int c = 0; c < cinfo->num_components; ++c) {
    const jpeg_component_info& comp = cinfo->comp_info[c];
    const int64_t blocks = static_cast<int64_t>(comp.width_in_blocks) * comp.height_in_blocks;
    min_blocks = min_blocks < 0 ? blocks : std::min(min_blocks, blocks);
    coef_blocks += static_cast<int64_t>(comp.width_in_blocks + comp.h_samp_factor) *
                   (comp.height_in_blocks + comp.v_samp_factor);
  }
  if (!cinfo->arith_code && static_cast<int64_t>(size) < CeilDiv(min_blocks, 8)) {
    s->min_bytes = CeilDiv(min_blocks, 8);
    s->failure = Failure::kShortData;
    return false;
  }
  // A multi-scan file buffers its coefficients (64 of 2 bytes a block) for the whole image,
  // whatever the scale: bound them by what the pixel limit allows (8 bytes a pixel).
  const int64_t cap = 8 * std::min<int64_t>(s->limits.max_pixels, int64_t{1} << 36);
  s->coef_bytes = coef_blocks * 128;
  if (cinfo->progressive_mode && s->coef_bytes > cap) {
    s->failure = Failure::kCoefficients;
    return false;
  }
  cinfo->mem->max_memory_to_use = static_cast<long>(cap + (int64_t{64} << 20));  // NOLINT
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(s->scale_denom);
  jpeg_calc_output_dimensions(cinfo);
  s->out_width = static_cast<int>(cinfo->output_width);
  s->out_height = static_cast<int>(cinfo->output_height);
  return true;
}

// The rows, after the caller admitted the output size. The output grows as rows decode.
bool RunJpegBody(JpegState* s) {
  j_decompress_ptr cinfo = &s->cinfo;
  if (setjmp(s->jump) != 0) return false;
  jpeg_start_decompress(cinfo);
  const size_t w = cinfo->output_width;
  const size_t h = cinfo->output_height;
  s->out->width = static_cast<int>(w);
  s->out->height = static_cast<int>(h);
  s->row.resize(w * static_cast<size_t>(cinfo->output_components));
  while (cinfo->output_scanline < cinfo->output_height) {
    if ((*s->cancelled)()) {
      s->failure = Failure::kCancelled;
      return false;
    }
    const size_t y = cinfo->output_scanline;
    GrowPixels(&s->out->pixels, (y + 1) * w * 3, h * w * 3);
    uint8_t* dst = s->out->pixels.data() + y * w * 3;
    if (s->components == 3) {
      JSAMPROW rows[1] = {dst};
      jpeg_read_scanlines(cinfo, rows, 1);
      continue;
    }
    JSAMPROW rows[1] = {s->row.data()};
    jpeg_read_scanlines(cinfo, rows, 1);
    const uint8_t* src = s->row.data();
    for (size_t x = 0; x < w; ++x) {
      if (s->components == 1) {
        dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = src[x];
      } else {
        const uint8_t* p = src + 4 * x;
        dst[3 * x + 0] = CmykChannel(p[0], p[3]);
        dst[3 * x + 1] = CmykChannel(p[1], p[3]);
        dst[3 * x + 2] = CmykChannel(p[2], p[3]);
      }
    }
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

// The EXIF block PIL keeps: the payload of the first APP1 that starts with "Exif\0", found by
// walking the markers before the first SOS (every length checked). Also whether a JFIF APP0
// with density unit 1 (which gives PIL a dpi) came before it.
void FindExif(std::span<const uint8_t> b, Decoded* d) {
  size_t p = 2;
  bool dpi = false;
  while (p + 4 <= b.size()) {
    if (b[p] != 0xFF) return;
    const uint8_t marker = b[p + 1];
    if (marker == 0xFF) {
      ++p;  // fill byte
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return;  // SOS / EOI
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {
      p += 2;
      continue;
    }
    const size_t len = (static_cast<size_t>(b[p + 2]) << 8) | b[p + 3];
    if (len < 2 || len > b.size() - p - 2) return;
    const std::span<const uint8_t> payload = b.subspan(p + 4, len - 2);
    if (marker == 0xE0 && payload.size() >= 12 && std::memcmp(payload.data(), "JFIF", 4) == 0 &&
        payload[7] == 1) {
      dpi = true;
    }
    if (marker == 0xE1 && payload.size() >= 5 && std::memcmp(payload.data(), "Exif\0", 5) == 0) {
      d->has_exif = true;
      d->exif.assign(payload.begin(), payload.end());
      d->ignore_bad_exif_prefix = !dpi;
      return;
    }
    p += 2 + len;
  }
}

// jpeg_create_decompress under its own setjmp (it can only fail for lack of memory), in a frame
// that holds no C++ object, so the longjmp clobbers nothing of DecodeJpeg's (GCC's -Wclobbered).
[[gnu::noinline]] bool CreateDecompress(JpegState* s) {
  if (setjmp(s->jump) != 0) return false;
  jpeg_create_decompress(&s->cinfo);
  return true;
}

}  // namespace

StatusOr<Decoded> DecodeJpeg(std::span<const uint8_t> bytes, const std::string& label,
                             const DecodeLimits& limits, const DecodeHooks& hooks) {
  Decoded d;
  JpegState s;
  s.limits = limits;
  s.out = &d.image;
  s.cinfo.err = jpeg_std_error(&s.err);
  s.err.error_exit = OnError;
  s.err.emit_message = OnMessage;
  s.progress.progress_monitor = OnProgress;
  s.cinfo.client_data = &s;
  if (!CreateDecompress(&s)) {
    return ResourceExhausted(label + ": libjpeg could not start: " + s.message);
  }
  s.cinfo.progress = &s.progress;
  s.cancelled = &hooks.cancelled;
  bool ok = false;
  Status admitted;
  try {
    ok = RunJpegHeader(&s, bytes.data(), bytes.size());
    if (ok) {
      admitted = hooks.admit(s.out_width, s.out_height);
      ok = admitted.ok() && RunJpegBody(&s);
    }
  } catch (const std::bad_alloc&) {
    jpeg_destroy_decompress(&s.cinfo);
    return ResourceExhausted(label + ": out of memory for a " + std::to_string(s.width) + " x " +
                             std::to_string(s.height) + " JPEG");
  }
  jpeg_destroy_decompress(&s.cinfo);
  if (!admitted.ok()) return admitted;
  if (!ok) {
    const std::string dims = std::to_string(s.width) + " x " + std::to_string(s.height);
    switch (s.failure) {
      case Failure::kTruncated: return DataLoss(label + ": JPEG data is truncated");
      case Failure::kCancelled: return Cancelled(label + ": JPEG decoding cancelled");
      case Failure::kShortData:
        return DataLoss(label + ": JPEG data is truncated: " + std::to_string(bytes.size()) +
                        " bytes cannot hold the declared " + dims + " image (at least " +
                        std::to_string(s.min_bytes) + " needed)");
      case Failure::kCoefficients:
        return InvalidArgument(label + ": progressive JPEG image is " + dims + ": its " +
                               std::to_string(s.coef_bytes >> 20) +
                               " MiB of coefficients are over what the limit of " +
                               std::to_string(limits.max_pixels) +
                               " decoded pixels per image allows");
      case Failure::kTooManyScans:
        return DataLoss(label + ": JPEG has more than " + std::to_string(kMaxJpegScans) +
                        " scans (kMaxJpegScans)");
      case Failure::kSize: {
        Status size = CheckImageSize(s.width, s.height, limits, label, "JPEG");
        if (size.code() != StatusCode::kInvalidArgument || !limits.allow_jpeg_scaling) return size;
        return InvalidArgument(size.message() + ", even decoded at 1/8 scale");
      }
      case Failure::kComponents:
        return Unimplemented(label + ": JPEG with " + std::to_string(s.components) +
                             " components (only 1, 3 and 4 are images)");
      default:
        if (std::strstr(s.message, "Unsupported JPEG process") != nullptr ||
            std::strstr(s.message, "Unsupported JPEG data precision") != nullptr) {
          return Unimplemented(label + ": " + s.message);
        }
        if (std::strstr(s.message, "Insufficient memory") != nullptr ||
            std::strstr(s.message, "Backing store") != nullptr) {
          return ResourceExhausted(label +
                                   ": JPEG needs more memory than its size allows: " + s.message);
        }
        return DataLoss(label + ": corrupt JPEG: " + s.message);
    }
  }
  FindExif(bytes, &d);
  return d;
}

}  // namespace vls::image::internal
