#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace vls {
namespace {

std::string ErrnoText(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

}  // namespace

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(ErrnoText("cannot open", path));
    return IoError(ErrnoText("cannot open", path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = IoError(ErrnoText("cannot stat", path));
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("not a regular file: '" + path + "'");
  }
  size_t size = static_cast<size_t>(st.st_size);
  const std::byte* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = IoError(ErrnoText("cannot mmap", path));
      ::close(fd);
      return s;
    }
    data = static_cast<const std::byte*>(p);
  }
  return std::unique_ptr<MappedFile>(new MappedFile(path, fd, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && size_ > 0) {
    ::munmap(const_cast<std::byte*>(data_),
             size_);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  ::close(fd_);
}

Status MappedFile::ReadAt(const std::byte* p, size_t n, void* out) const {
  if (p < data_ || static_cast<size_t>(p - data_) > size_ ||
      n > size_ - static_cast<size_t>(p - data_)) {
    return OutOfRange("read of " + std::to_string(n) + " bytes outside the mapping of '" + path_ +
                      "'");
  }
  auto offset = static_cast<off_t>(p - data_);
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, dst, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return IoError(got < 0 ? ErrnoText("cannot read", path_)
                             : "cannot read '" + path_ + "': the file is shorter than when mapped");
    }
    dst += got;
    offset += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return NotFound(ErrnoText("cannot open", path));
    return IoError(ErrnoText("cannot open", path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(ErrnoText("cannot read", path));
  return ss.str();
}

StatusOr<std::string> ReadFileAtMost(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return NotFound(ErrnoText("cannot open", path));
    return IoError(ErrnoText("cannot open", path));
  }
  std::string text;
  constexpr size_t kChunk = size_t{1} << 20;
  while (text.size() <= max_bytes) {
    const size_t old = text.size();
    const size_t want = std::min(kChunk, max_bytes + 1 - old);
    text.resize(old + want);
    in.read(text.data() + old, static_cast<std::streamsize>(want));
    text.resize(old + static_cast<size_t>(in.gcount()));
    if (in.bad()) return IoError(ErrnoText("cannot read", path));
    if (!in) break;  // end of file
  }
  return text;
}

namespace {

// A name for a temporary file next to `target` that nobody can predict: pid, time and a counter
// mixed (O_EXCL refuses it anyway when it exists).
std::string TempNameFor(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  uint64_t x = static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (counter.fetch_add(1) << 40);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), ".tmp.%012llx",
                static_cast<unsigned long long>(x & 0xffffffffffffull));
  return target + suffix;
}

}  // namespace

StatusOr<std::unique_ptr<OutputFile>> OutputFile::Open(const std::string& path) {
  if (path.empty()) return IoError("cannot write '': the output path is empty");
  std::string target = path;
  struct stat st {};
  bool exists = ::lstat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return IoError(ErrnoText("cannot write", path));
  if (exists && S_ISLNK(st.st_mode)) {
    // Written through: the rules below apply to the file the link names.
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved) == nullptr) {
      return IoError(ErrnoText("cannot write through the symbolic link", path));
    }
    target = resolved;
    exists = ::stat(target.c_str(), &st) == 0;
    if (!exists) return IoError(ErrnoText("cannot write through the symbolic link", path));
  }
  if (exists && S_ISDIR(st.st_mode)) {
    return IoError("cannot write '" + path + "': it is a directory");
  }
  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // In place. O_NONBLOCK: a FIFO without a reader fails with ENXIO instead of blocking.
    const int fd = ::open(target.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENXIO) return IoError("cannot write '" + path + "': a FIFO with no reader");
      return IoError(ErrnoText("cannot write", path));
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return std::unique_ptr<OutputFile>(new OutputFile(path, target, "", fd));
  }
  if (exists && !S_ISREG(st.st_mode)) {
    return IoError("cannot write '" + path +
                   "': it is not a regular file, a character device or a FIFO");
  }
  // New or regular: a fresh temporary file next to the target, renamed onto it at Commit.
  const mode_t mode = exists ? (st.st_mode & 07777) : 0666;  // 0666 is narrowed by the umask
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string tmp = TempNameFor(target);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return IoError(ErrnoText("cannot create", tmp));
    }
    if (exists) (void)::fchmod(fd, mode);  // the old file's bits, whatever the umask
    return std::unique_ptr<OutputFile>(new OutputFile(path, target, std::move(tmp), fd));
  }
  return IoError("cannot create a temporary file next to '" + target + "'");
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

Status OutputFile::Append(const void* data, size_t n) {
  if (fd_ < 0) return IoError("cannot write '" + path_ + "': the file is closed");
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return IoError(ErrnoText("cannot write", tmp_.empty() ? path_ : tmp_));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status OutputFile::Commit() {
  if (fd_ < 0) return IoError("cannot write '" + path_ + "': the file is closed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return IoError(ErrnoText("cannot write", tmp_.empty() ? path_ : tmp_));
  if (!tmp_.empty() && ::rename(tmp_.c_str(), target_.c_str()) != 0) {
    return IoError(ErrnoText("cannot rename to", target_));
  }
  committed_ = true;
  return Status::Ok();
}

Status WriteStringToFile(const std::string& path, std::string_view contents) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(path));
  VLS_RETURN_IF_ERROR(out->Append(contents.data(), contents.size()));
  return out->Commit();
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (!name.empty() && name.front() == '/') return std::string(name);
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

std::string DirName(std::string_view path) {
  size_t pos = path.rfind('/');
  if (pos == std::string_view::npos) return ".";
  if (pos == 0) return "/";
  return std::string(path.substr(0, pos));
}

}  // namespace vls
