// Fuzz target for video decoding (src/video/video_decode.h): a container (MP4/MOV, Matroska/WebM,
// AVI, MPEG-TS) from outside, probed and its first frames decoded through FFmpeg.
//
// Every input must give a Status naming the label, or a probe and frames that keep the limits
// they were decoded under (each frame exactly width * height * 3 bytes, all of one size, the
// probe's display size). Decoding is deterministic. The limits are far smaller than the defaults
// so that a small input declaring a large clip stays fast; the checks are the same code at any
// bound.
//
// Real fuzzing: scripts/fuzz.sh 600 video_container. Without libFuzzer,
// `video_container_fuzz_replay` (a ctest) runs this target over tests/corpus/video_container and
// mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "video/video_decode.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "video_container_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckLabel(const vls::Status& s) {
  if (s.message().rfind("fuzz.video: ", 0) != 0) {
    Fail("error message does not start with the label", s.ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vls::video::VideoLimits limits;
  limits.max_bytes = size_t{1} << 20;
  limits.max_side = 512;
  limits.max_frame_pixels = 256 * 256;
  limits.max_frames = 4096;
  limits.max_streams = 8;
  limits.max_output_bytes = int64_t{1} << 20;
  const std::span<const uint8_t> bytes(data, size);
  const bool verbose = std::getenv("VLS_FUZZ_VERBOSE") != nullptr;
  auto info = vls::video::ProbeVideo(bytes, "fuzz.video", limits);
  if (verbose)
    std::fprintf(stderr, "probe: %s\n", info.ok() ? "ok" : info.status().ToString().c_str());
  if (!info.ok()) {
    CheckLabel(info.status());
  } else if (info->coded_width < 1 || info->coded_height < 1 ||
             info->coded_width > limits.max_side || info->coded_height > limits.max_side ||
             int64_t{info->coded_width} * info->coded_height > limits.max_frame_pixels ||
             info->frames < 0 || info->frames > limits.max_frames || !(info->fps > 0) ||
             info->fps > limits.max_fps || info->streams > limits.max_streams) {
    Fail("accepted a probe outside the limits",
         std::to_string(info->coded_width) + "x" + std::to_string(info->coded_height));
  }
  const std::vector<int64_t> indices = {0, 2};
  auto frames = vls::video::DecodeFrames(bytes, "fuzz.video", indices, limits);
  if (verbose) {
    std::fprintf(stderr, "decode: %s\n", frames.ok() ? "ok" : frames.status().ToString().c_str());
  }
  if (!frames.ok()) {
    CheckLabel(frames.status());
    return 0;
  }
  if (frames->size() != indices.size()) Fail("wrong number of frames", "");
  for (const auto& f : *frames) {
    const int64_t w = f.width;
    const int64_t h = f.height;
    if (w < 1 || h < 1 || w > limits.max_side || h > limits.max_side ||
        w * h > limits.max_frame_pixels) {
      Fail("returned a frame outside the limits", std::to_string(w) + "x" + std::to_string(h));
    }
    if (f.pixels.size() != static_cast<size_t>(w * h * 3)) Fail("pixel buffer size", "");
    if (w != (*frames)[0].width || h != (*frames)[0].height) Fail("frames of two sizes", "");
    if (info.ok() && (w != info->width || h != info->height)) {
      Fail("frame size differs from the probe's display size",
           std::to_string(w) + "x" + std::to_string(h) + " vs " + std::to_string(info->width) +
               "x" + std::to_string(info->height));
    }
  }
  auto again = vls::video::DecodeFrames(bytes, "fuzz.video", indices, limits);
  if (!again.ok() || again->size() != frames->size()) Fail("decoding is not deterministic", "");
  for (size_t i = 0; i < frames->size(); ++i) {
    if ((*again)[i].pixels != (*frames)[i].pixels) Fail("decoding is not deterministic", "");
  }
  return 0;
}
