// WebP through libwebp's animation decoder, as Pillow 9.4 decodes every WebP (WebPAnimDecoder,
// non-premultiplied RGBA): a still image is its one frame, an animation is its first frame on
// the (transparent black) canvas. Alpha is dropped. The EXIF is the first EXIF chunk.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>
#include <string>

#include "image/codecs.h"

namespace vls::image::internal {

StatusOr<Decoded> DecodeWebp(std::span<const uint8_t> bytes, const std::string& label,
                             const DecodeLimits& limits, const DecodeHooks& hooks) {
  WebPBitstreamFeatures features;
  const VP8StatusCode code = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (code == VP8_STATUS_NOT_ENOUGH_DATA) return DataLoss(label + ": WebP data is truncated");
  if (code != VP8_STATUS_OK) {
    return DataLoss(label + ": corrupt WebP header (libwebp status " +
                    std::to_string(static_cast<int>(code)) + ")");
  }
  // For an extended file these are the canvas's: the buffers the decoder makes.
  VLS_RETURN_IF_ERROR(CheckImageSize(features.width, features.height, limits, label, "WebP"));
  // libwebp decodes a frame in one call (no row hook): cancellation is checked around it. The
  // demuxer below refuses a file whose chunks are cut short before the canvas is allocated.
  VLS_RETURN_IF_ERROR(hooks.admit(features.width, features.height));

  WebPData data{bytes.data(), bytes.size()};
  WebPAnimDecoderOptions options;
  if (WebPAnimDecoderOptionsInit(&options) == 0) return Internal("libwebp version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> owner(
      WebPAnimDecoderNew(&data, &options), WebPAnimDecoderDelete);
  WebPAnimDecoder* dec = owner.get();
  if (dec == nullptr) {
    return DataLoss(label + ": WebP data is truncated or corrupt (libwebp cannot parse it)");
  }
  Decoded d;
  WebPAnimInfo info;
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (WebPAnimDecoderGetInfo(dec, &info) == 0 ||
      static_cast<int>(info.canvas_width) != features.width ||
      static_cast<int>(info.canvas_height) != features.height) {
    return DataLoss(label + ": WebP canvas does not match its header");
  }
  if (hooks.cancelled()) return Cancelled(label + ": WebP decoding cancelled");
  if (WebPAnimDecoderGetNext(dec, &rgba, &timestamp) == 0) {
    return DataLoss(label + ": WebP image data is truncated or corrupt");
  }
  const size_t n = static_cast<size_t>(features.width) * static_cast<size_t>(features.height);
  d.image.width = features.width;
  d.image.height = features.height;
  d.image.pixels.resize(n * 3);
  for (size_t i = 0; i < n; ++i) std::memcpy(&d.image.pixels[3 * i], rgba + 4 * i, 3);

  const WebPDemuxer* demux = WebPAnimDecoderGetDemuxer(dec);
  WebPChunkIterator chunk;
  if (WebPDemuxGetChunk(demux, "EXIF", 1, &chunk) != 0) {
    d.has_exif = true;
    d.exif.assign(chunk.chunk.bytes, chunk.chunk.bytes + chunk.chunk.size);
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  return d;
}

}  // namespace vls::image::internal
