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

// Reads `path` without trusting its size (a FIFO or a device never ends): at most max_bytes + 1
// bytes, read in chunks, so a result longer than max_bytes says the file is over the bound
// (the caller names the bound in its error). NotFound / IoError as ReadFileToString.
StatusOr<std::string> ReadFileAtMost(const std::string& path, size_t max_bytes);

// A file being written to an output path the user named. The rule, by what `path` is when
// Open looks at it:
//   * nothing: a temporary file is created next to it (a fresh random name, O_CREAT|O_EXCL, so
//     nothing already there is followed or clobbered), written, and renamed onto `path` by
//     Commit, so a reader never sees a half-written file;
//   * a regular file: the same, the new file taking the old one's permission bits;
//   * a symbolic link: written through: the link is resolved (every level) and the rules apply
//     to the file it names, so the link stays and its target gets the bytes (a dangling link
//     is refused);
//   * a character device (/dev/null) or a FIFO: written in place (opened O_WRONLY, never
//     replaced by a regular file); a FIFO nobody reads is refused rather than waited for;
//   * a directory, a socket or a block device: refused.
// Errors are IoError naming the path. Thread safety: one owner.
class OutputFile {
 public:
  static StatusOr<std::unique_ptr<OutputFile>> Open(const std::string& path);
  // Removes the temporary file when Commit did not succeed.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  Status Append(const void* data, size_t n);
  // Flushes and closes; renames the temporary file onto the target. Nothing may follow.
  Status Commit();

  // The file the bytes go to (the link's target for a symbolic link).
  const std::string& target() const { return target_; }

 private:
  OutputFile(std::string path, std::string target, std::string tmp, int fd)
      : path_(std::move(path)), target_(std::move(target)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_;    // as the caller named it
  std::string target_;  // what is written (resolved)
  std::string tmp_;     // the temporary file renamed onto target_; empty when written in place
  int fd_;
  bool committed_ = false;
};

// Writes `contents` to `path` through OutputFile (the rule above).
Status WriteStringToFile(const std::string& path, std::string_view contents);

// Joins a directory and a relative name ("dir" + "/" + "name"); absolute names are returned as is.
std::string JoinPath(std::string_view dir, std::string_view name);
std::string DirName(std::string_view path);

}  // namespace vls

#endif  // VLSTACK_BASE_FILE_H_
