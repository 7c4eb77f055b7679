// Where the bytes of an image or video content part come from (chat requests: CLI, C ABI,
// server).
//
// A part names its image the ways transformers and the OpenAI API do:
//   {"type": "image", "image": SRC}  {"type": "image", "url": SRC}  {"type": "image", "path": SRC}
//   {"type": "image_url", "image_url": {"url": SRC}}  {"type": "image_url", "image_url": SRC}
// SRC is a `data:` URL (`data:image/png;base64,...`), a `file://` URL or a plain path. Files are
// read only when the policy allows it (the CLI does; a server must not by default), relative
// paths against the policy's base folder. Remote URLs (http, https, ...) are refused: vlstack
// never fetches from the network.
#ifndef VLSTACK_RUNTIME_MEDIA_SOURCE_H_
#define VLSTACK_RUNTIME_MEDIA_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vls {

// The largest encoded image a request may carry (64 MiB: a 100-megapixel JPEG is far smaller).
inline constexpr size_t kMaxMediaBytes = size_t{64} << 20;
// The largest encoded video (256 MiB: minutes of 1080p H.264).
inline constexpr size_t kMaxVideoBytes = size_t{256} << 20;

struct MediaPolicy {
  bool allow_files = false;  // read file paths and file:// URLs
  std::string base_dir;      // relative paths are resolved against this (empty: the cwd)
  // When set (an absolute, canonical folder), a file must resolve (symbolic links and `..`
  // followed) to a path inside it; others are refused (the server's --allow-local-files).
  std::string root_dir;
  size_t max_bytes = kMaxMediaBytes;        // an image
  size_t max_video_bytes = kMaxVideoBytes;  // a video
};

struct MediaBytes {
  std::string label;           // the path, or "data URL (image/png, 1234 bytes)"
  std::vector<uint8_t> bytes;  // the encoded image
};

// The bytes of an image part. InvalidArgument names what is wrong (no source, a malformed data
// URL, a remote URL, files not allowed, a path that is not a regular file, a file over
// max_bytes); NotFound / IoError for a file that cannot be read. Files are opened without
// blocking (O_NONBLOCK: a FIFO or device is refused at once, never waited on) and checked on
// the opened descriptor. Under root_dir a path is first checked lexically (`..` applied, no
// file system access), so a path outside the folder gets the same InvalidArgument whether or
// not it exists; a path inside it is then resolved through its links (one leading out is
// refused the same way) and opened with O_NOFOLLOW.
StatusOr<MediaBytes> ReadImagePart(const nlohmann::ordered_json& part, const MediaPolicy& policy);

// The bytes of a video part, read the same way: {"type": "video", "video": SRC},
// {"type": "video", "url" | "path": SRC}, {"type": "video_url", "video_url": {"url": SRC}} or
// {"type": "video_url", "video_url": SRC}; data URLs of a video/ media type; at most
// policy.max_video_bytes.
StatusOr<MediaBytes> ReadVideoPart(const nlohmann::ordered_json& part, const MediaPolicy& policy);

// vLLM's {"type": "video_url", "video_url": {"url": SRC} | SRC, ...} rewritten as the
// {"type": "video", "video": SRC, ...} part the Qwen3-VL chat template places (it finds a video
// by "video"; a video_url part would be dropped), the part's other fields kept, as vLLM does
// before rendering. Any other part is left as it is.
void VideoUrlAsVideoPart(nlohmann::ordered_json* part);

// Strict base64 (RFC 4648, standard alphabet, padding required when the length is not a
// multiple of 4; no whitespace). InvalidArgument names the offset of the first bad byte.
StatusOr<std::vector<uint8_t>> DecodeBase64(std::string_view text, size_t max_bytes);

// Standard base64 with padding (the canonical form DecodeBase64 reads back).
std::string EncodeBase64(std::span<const uint8_t> bytes);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_MEDIA_SOURCE_H_
