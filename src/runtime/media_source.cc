#include "runtime/media_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "base/file.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

int Base64Value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// The words of an image part or of a video part.
struct PartKind {
  const char* noun;     // "image"
  const char* key;      // "image"
  const char* url_key;  // "image_url"
  const char* mime;     // "image/"
};
constexpr PartKind kImageKind{"image", "image", "image_url", "image/"};
constexpr PartKind kVideoKind{"video", "video", "video_url", "video/"};

// The source string of a part, or an error naming the keys looked for.
StatusOr<std::string> PartSource(const Json& part, const PartKind& kind) {
  const Json* src = nullptr;
  for (const char* key : {kind.key, "url", "path"}) {
    if (auto it = part.find(key); it != part.end()) {
      src = &*it;
      break;
    }
  }
  if (src == nullptr) {
    if (auto it = part.find(kind.url_key); it != part.end()) {
      src = &*it;
      if (it->is_object()) {
        auto url = it->find("url");
        if (url == it->end()) return InvalidArgument(std::string(kind.url_key) + " has no \"url\"");
        src = &*url;
      }
    }
  }
  if (src == nullptr) {
    const std::string k = kind.key, u = kind.url_key, n = kind.noun;
    return InvalidArgument(std::string(n == "image" ? "an image" : "a video") + " part needs \"" +
                           k + "\", \"url\", \"path\" or \"" + u + "\" naming the " + n);
  }
  if (!src->is_string()) {
    return InvalidArgument("the " + std::string(kind.noun) + " source must be a string");
  }
  return src->get<std::string>();
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

StatusOr<MediaBytes> FromDataUrl(std::string_view url, size_t max_bytes, const PartKind& kind) {
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return InvalidArgument("data URL without a ','");
  std::string_view meta = url.substr(5, comma - 5);
  const std::string_view payload = url.substr(comma + 1);
  constexpr std::string_view kB64 = ";base64";
  if (meta.size() < kB64.size() || meta.substr(meta.size() - kB64.size()) != kB64) {
    return InvalidArgument("data URL is not base64 (expected data:" + std::string(kind.mime) +
                           "...;base64,...)");
  }
  meta.remove_suffix(kB64.size());
  if (!meta.empty() && !StartsWith(meta, kind.mime)) {
    return InvalidArgument("data URL media type '" + std::string(meta.substr(0, 64)) + "' is not " +
                           (kind.noun == kImageKind.noun ? "an image" : "a video"));
  }
  VLS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, DecodeBase64(payload, max_bytes));
  MediaBytes out;
  out.label = "data URL (" + (meta.empty() ? std::string("no media type") : std::string(meta)) +
              ", " + std::to_string(bytes.size()) + " bytes)";
  out.bytes = std::move(bytes);
  return out;
}

bool UnderRoot(const std::string& path, const std::string& root) {
  return path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
         (root.back() == '/' || path[root.size()] == '/');
}

Status OutsideRoot(const std::string& shown) {
  return InvalidArgument(shown + ": only files under the allowed folder may be read");
}

// At most max_bytes of a regular file. Opened without blocking (a FIFO or a device would hold
// the request's thread in open() or read() for ever), then checked on the descriptor itself.
StatusOr<std::string> ReadRegularFile(const std::string& path, const std::string& shown,
                                      size_t max_bytes, bool nofollow) {
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0);
  const int fd = ::open(path.c_str(), flags);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound(shown + ": no such file");
    if (err == ELOOP) return InvalidArgument(shown + ": is a symbolic link");
    return IoError(shown + ": cannot open: " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return IoError(shown + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(shown + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return InvalidArgument(shown + ": larger than " + std::to_string(max_bytes) +
                           " bytes (kMaxMediaBytes)");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(shown + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;  // shrank meanwhile
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace

StatusOr<std::vector<uint8_t>> DecodeBase64(std::string_view text, size_t max_bytes) {
  if (text.size() % 4 != 0) {
    return InvalidArgument("base64 data has length " + std::to_string(text.size()) +
                           ", not a multiple of 4");
  }
  if (text.size() / 4 * 3 > max_bytes + 2) {
    return InvalidArgument("base64 data decodes to more than " + std::to_string(max_bytes) +
                           " bytes");
  }
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    // Padding only at the end: "xx==" or "xxx=".
    int pad = 0;
    if (i + 4 == text.size()) {
      if (text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    }
    int v[4] = {0, 0, 0, 0};
    for (int j = 0; j < 4 - pad; ++j) {
      v[j] = Base64Value(static_cast<unsigned char>(text[i + static_cast<size_t>(j)]));
      if (v[j] < 0) {
        return InvalidArgument("base64 data has an invalid byte at offset " +
                               std::to_string(i + static_cast<size_t>(j)));
      }
    }
    const uint32_t n = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out.push_back(static_cast<uint8_t>(n >> 16));
    if (pad < 2) out.push_back(static_cast<uint8_t>(n >> 8));
    if (pad < 1) out.push_back(static_cast<uint8_t>(n));
  }
  if (out.size() > max_bytes) {
    return InvalidArgument("base64 data decodes to more than " + std::to_string(max_bytes) +
                           " bytes");
  }
  return out;
}

std::string EncodeBase64(std::span<const uint8_t> bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint32_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= bytes[i + 2];
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

namespace {

StatusOr<MediaBytes> ReadPart(const Json& part, const MediaPolicy& policy, const PartKind& kind,
                              size_t max_bytes) {
  const std::string noun = kind.noun;
  VLS_ASSIGN_OR_RETURN(std::string src, PartSource(part, kind));
  if (src.empty()) return InvalidArgument("the " + noun + " source is empty");
  if (StartsWith(src, "data:")) return FromDataUrl(src, max_bytes, kind);
  std::string path = src;
  if (StartsWith(src, "file://")) {
    path = src.substr(7);
  } else if (const size_t colon = src.find("://"); colon != std::string::npos && colon < 16) {
    return InvalidArgument(noun + " '" + src.substr(0, 80) +
                           "': remote URLs are not fetched (send the " + noun +
                           " as a data: URL or, from the command line, a file)");
  }
  if (!policy.allow_files) {
    return InvalidArgument(noun + " '" + src.substr(0, 80) +
                           "': file paths are not accepted here (send the " + noun +
                           " as a data: URL)");
  }
  if (!path.empty() && path[0] != '/' && !policy.base_dir.empty())
    path = JoinPath(policy.base_dir, path);
  const std::string shown = noun + " '" + src.substr(0, 200) + "'";
  bool nofollow = false;
  if (!policy.root_dir.empty()) {
    // Lexically first, without touching the file system, so that a path outside the folder is
    // refused the same way whether or not it exists; then through its symbolic links.
    std::error_code ec;
    const std::filesystem::path lexical = std::filesystem::absolute(path, ec).lexically_normal();
    if (ec || !UnderRoot(lexical.string(), policy.root_dir)) return OutsideRoot(shown);
    const std::filesystem::path real = std::filesystem::canonical(lexical, ec);
    if (ec) return NotFound(shown + ": no such file");
    if (!UnderRoot(real.string(), policy.root_dir)) return OutsideRoot(shown);
    path = real.string();
    nofollow = true;  // resolved: a link appearing now is a swap
  }
  VLS_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, shown, max_bytes, nofollow));
  MediaBytes out;
  out.label = path;
  out.bytes.assign(bytes.begin(), bytes.end());
  return out;
}

}  // namespace

StatusOr<MediaBytes> ReadImagePart(const Json& part, const MediaPolicy& policy) {
  return ReadPart(part, policy, kImageKind, policy.max_bytes);
}

void VideoUrlAsVideoPart(Json* part) {
  if (!part->is_object()) return;
  auto type = part->find("type");
  auto url = part->find("video_url");
  if (type == part->end() || *type != "video_url" || url == part->end()) return;
  Json src = *url;
  if (src.is_object() && src.contains("url")) src = src["url"];
  Json out = Json::object();
  out["type"] = "video";
  out["video"] = std::move(src);
  for (auto& [k, v] : part->items()) {
    if (k != "type" && k != "video_url") out[k] = std::move(v);
  }
  *part = std::move(out);
}

StatusOr<MediaBytes> ReadVideoPart(const Json& part, const MediaPolicy& policy) {
  return ReadPart(part, policy, kVideoKind, policy.max_video_bytes);
}

}  // namespace vls
