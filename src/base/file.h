// Files: read-only memory maps and whole-file reads/writes, with Status errors.
#ifndef VLSTACK_BASE_FILE_H_
#define VLSTACK_BASE_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vls {

// A read-only private mapping of a whole file. Zero-length files map to an empty span.
// Thread safety: immutable after Open; safe to read from any thread.
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Copies the n bytes at p, which lie inside this mapping, into out[n] with pread: the bytes
  // come from the page cache without mapping their pages into the process (a page fault maps
  // a whole folio, up to about a megabyte, that stays resident until released). OutOfRange when
  // [p, p + n) is not inside the mapping; IoError (naming the file) when the read fails or comes
  // up short (a file truncated since it was mapped).
  Status ReadAt(const std::byte* p, size_t n, void* out) const;

 private:
  MappedFile(std::string path, int fd, const std::byte* data, size_t size)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size) {}
  std::string path_;
  int fd_;  // kept open for ReadAt
  const std::byte* data_;
  size_t size_;
};

StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes to `path.tmp` then renames, so a reader never sees a half-written file.
Status WriteStringToFile(const std::string& path, std::string_view contents);

// Joins a directory and a relative name ("dir" + "/" + "name"); absolute names are returned as is.
std::string JoinPath(std::string_view dir, std::string_view name);
std::string DirName(std::string_view path);

}  // namespace vls

#endif  // VLSTACK_BASE_FILE_H_
