#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

Status WriteStringToFile(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return IoError(ErrnoText("cannot create", tmp));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) return IoError(ErrnoText("cannot write", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = IoError(ErrnoText("cannot rename to", path));
    std::remove(tmp.c_str());
    return s;
  }
  return Status::Ok();
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
