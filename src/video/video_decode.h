// Video decoding (issue 35): a whole clip held in memory -> RGB frames, through Debian's FFmpeg 5.1
// libraries, pixel for pixel what PyAV 10 (python3-av, over the same libraries) gives
// transformers: `container.decode(video=0)` numbered by enumerate, `to_ndarray(format="rgb24")`,
// then turned upright as a player shows the clip (docs/video.md states the rules).
//
// Every input is untrusted: the bytes are read from memory only (no file, protocol or nested
// reference is ever opened), only the containers and codecs docs/video.md lists are accepted,
// and every size, duration, frame count, frame rate and stream count the headers declare is
// checked against VideoLimits before any frame is decoded. FFmpeg's log output never reaches
// stderr (a quiet log callback is installed for the whole process on first use). Every refusal
// is a Status whose message begins with the caller's label ("clip.mp4: ...").
#ifndef VLSTACK_VIDEO_VIDEO_DECODE_H_
#define VLSTACK_VIDEO_VIDEO_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "image/image.h"

namespace vls::video {

// Every bound is named in the error that it causes and documented in docs/limits.md ("Video").
struct VideoLimits {
  size_t max_bytes = size_t{256} << 20;  // encoded clip
  int max_side = 8192;                   // width or height (declared and decoded)
  int64_t max_frame_pixels = int64_t{8192} * 8192;
  int64_t max_frames = int64_t{1} << 20;  // declared (nb_frames) or counted; also bounds indices
  double max_duration_s = 6 * 3600.0;
  double max_fps = 1000.0;                      // a frame rate <= 0 or not finite is refused too
  int max_streams = 16;                         // streams in the container
  int64_t max_output_bytes = int64_t{4} << 30;  // RGB bytes of the frames one DecodeFrames returns
};

struct VideoInfo {
  // total_num_frames as PyAV/transformers read it: the video stream's nb_frames; when the
  // container does not declare it (WebM, MPEG-TS), counted by demuxing the stream's packets.
  int64_t frames = 0;
  double fps = 0;         // the stream's avg_frame_rate (PyAV's average_rate), else r_frame_rate
  double duration_s = 0;  // the stream's duration, else the container's; 0 when neither is known
  int width = 0, height = 0;              // as displayed (after rotation)
  int coded_width = 0, coded_height = 0;  // as stored (the decoder's output size)
  // Degrees, 0/90/180/270: the clockwise turn applied for display (from the display matrix side
  // data, ffmpeg's autorotate semantics; a mirrored matrix is also flipped, an angle that is no
  // multiple of 90 is not applied and reads 0).
  int rotation = 0;
  std::string container;  // demuxer name ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "avi", ...)
  std::string codec;      // decoder name ("h264", "vp9", ...)
  int streams = 0;        // streams in the container (all kinds)
  int video_stream = -1;  // the first video stream (PyAV's container.decode(video=0))
};

// Opens the container from memory and reads its header (no frame is converted; FFmpeg's stream
// probing may decode a few packets to learn the codec parameters). Errors, each naming `label`:
//   InvalidArgument: empty input, not a container of the accepted kinds, no video stream, an
//     unsupported codec (named), or a value over a VideoLimits bound (the message names the
//     value and the bound: "clip.mp4: 65535x65535 frames exceed max_side 8192");
//   DataLoss: a container FFmpeg cannot read (truncated or corrupt header);
//   Cancelled: never (ProbeVideo takes no cancel check).
// Thread safety: none needed; every call has its own FFmpeg state.
StatusOr<VideoInfo> ProbeVideo(std::span<const uint8_t> bytes, const std::string& label,
                               const VideoLimits& limits = {});

// The frames at `indices` (strictly increasing, 0-based positions in the decode order of the
// first video stream, exactly as `for i, frame in enumerate(container.decode(video=0))` numbers
// them), converted to RGB24 exactly as PyAV's frame.to_ndarray(format="rgb24") gives them, then
// rotated for display (VideoInfo::rotation). Decoding stops after the last requested frame.
// `cancelled` (may be null) is polled between packets and frames and while FFmpeg reads.
// Errors, each naming `label`, beyond ProbeVideo's:
//   InvalidArgument: indices not strictly increasing, negative or >= limits.max_frames; their
//     frames over limits.max_output_bytes; an index past the last decodable frame (the message
//     names both numbers); a decoded frame over max_side / max_frame_pixels or of another size
//     than the first decoded frame (a clip that changes size mid-way is refused);
//   DataLoss: the decoder or demuxer failed on the data before the last requested frame;
//   Cancelled: `cancelled` returned true.
// An empty `indices` returns no frames after the header checks.
// Thread safety: none needed; every call has its own FFmpeg state (one decoder thread).
StatusOr<std::vector<image::RgbImage>> DecodeFrames(
    std::span<const uint8_t> bytes, const std::string& label, std::span<const int64_t> indices,
    const VideoLimits& limits = {}, const std::function<bool()>& cancelled = nullptr);

// Receives the k-th requested frame (k indexes `indices`) as it is decoded; an error stops the
// decode and is returned.
using FrameSink = std::function<Status(size_t k, image::RgbImage frame)>;

// DecodeFrames handing each frame to `sink` as soon as it is decoded instead of returning them
// all, so the caller keeps only what it makes of them (a resized frame): max_output_bytes does
// not apply. Same checks and errors otherwise.
Status DecodeFramesTo(std::span<const uint8_t> bytes, const std::string& label,
                      std::span<const int64_t> indices, const FrameSink& sink,
                      const VideoLimits& limits = {},
                      const std::function<bool()>& cancelled = nullptr);

}  // namespace vls::video

#endif  // VLSTACK_VIDEO_VIDEO_DECODE_H_
