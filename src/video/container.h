// Internal to src/video: a container opened from memory with FFmpeg's demuxers, under the rules
// of video_decode.h (no file, protocol or nested open; accepted containers and codecs only; the
// header's values checked against VideoLimits).
#ifndef VLSTACK_VIDEO_CONTAINER_H_
#define VLSTACK_VIDEO_CONTAINER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "video/video_decode.h"

extern "C" {
struct AVFormatContext;
struct AVIOContext;
struct AVCodec;
}

namespace vls::video::internal {

// How the decoder turns a frame for display: the output pixel (x, y) reads the source pixel
// (sx, sy) with, for a transposed orientation, sx from y and sy from x; each mirrored, counted
// from the far edge (ffmpeg's transpose / hflip / vflip filters, as its autorotate inserts them).
struct Orientation {
  bool transpose = false;
  bool mirror_x = false;  // the source x runs right to left
  bool mirror_y = false;  // the source y runs bottom to top
  int degrees = 0;        // VideoInfo::rotation
};

// The orientation ffmpeg's autorotate gives a display matrix (9 int32 in 16.16 / 2.30 fixed
// point, AV_PKT_DATA_DISPLAYMATRIX); identity for an angle that is no multiple of 90.
Orientation OrientationFromMatrix(const int32_t matrix[9]);

// The text of an AVERROR code ("Invalid data found when processing input").
std::string AvErrorText(int error);

// The error-level lines FFmpeg logged on this thread since ClearAvLog ("; "-joined, at most
// about 1 KiB; empty if none). FFmpeg's log goes nowhere else: the process-wide callback is
// installed by the first MemoryContainer::Open.
std::string AvLogErrors();
void ClearAvLog();

// An AVFormatContext reading `bytes` (which must outlive it) through a custom AVIOContext.
class MemoryContainer {
 public:
  // Checks the size, probes the container kind (refused by name unless accepted), reads the
  // header and the stream parameters, picks the first video stream and checks everything
  // ProbeVideo documents, except the frame count when the container does not declare one (see
  // CountFrames). `cancelled` (may be null) is polled while FFmpeg reads.
  static StatusOr<std::unique_ptr<MemoryContainer>> Open(std::span<const uint8_t> bytes,
                                                         const std::string& label,
                                                         const VideoLimits& limits,
                                                         const std::function<bool()>& cancelled);
  ~MemoryContainer();
  MemoryContainer(const MemoryContainer&) = delete;
  MemoryContainer& operator=(const MemoryContainer&) = delete;

  // Demuxes every packet to count the video stream's (the container declared no frame count):
  // VideoInfo::frames. InvalidArgument over limits.max_frames; DataLoss if the demuxer fails.
  // Leaves the read position at the end: call once, and not before decoding.
  Status CountFrames();

  AVFormatContext* format() const { return format_; }
  const AVCodec* decoder() const { return decoder_; }
  const VideoInfo& info() const { return info_; }
  const Orientation& orientation() const { return orientation_; }
  bool frames_declared() const { return frames_declared_; }
  const std::string& label() const { return label_; }
  const VideoLimits& limits() const { return limits_; }
  bool cancelled() const { return cancelled_ && cancelled_(); }
  // The decoders FFmpeg may open for this container (its codec_whitelist).
  static const std::string& DecoderWhitelist();

  struct Reader;  // the AVIOContext's read position over the bytes

 private:
  MemoryContainer(std::span<const uint8_t> bytes, const std::string& label,
                  const VideoLimits& limits, const std::function<bool()>& cancelled);
  Status OpenInput();
  Status CheckHeader();

  std::string label_;
  VideoLimits limits_;
  std::function<bool()> cancelled_;  // a copy: the caller's may be a temporary
  std::unique_ptr<Reader> reader_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* format_ = nullptr;
  const AVCodec* decoder_ = nullptr;
  VideoInfo info_;
  Orientation orientation_;
  bool frames_declared_ = false;
};

}  // namespace vls::video::internal

#endif  // VLSTACK_VIDEO_CONTAINER_H_
