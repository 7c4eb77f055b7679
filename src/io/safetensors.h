// safetensors: memory-mapped, zero-copy reading (single files and sharded checkpoints) and writing.
//
// The header of a safetensors file is untrusted input. Open() checks every offset, size and
// dtype with overflow-safe arithmetic: a truncated, overlapping or lying file gives a Status
// naming the file and the tensor, never a crash.
#ifndef VLSTACK_IO_SAFETENSORS_H_
#define VLSTACK_IO_SAFETENSORS_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace vls {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offset into the data section
  uint64_t end = 0;
};

// One open safetensors file. Views stay valid as long as the file object lives.
// Thread safety: immutable after Open.
class SafetensorsFile {
 public:
  // Maps and validates the file.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates an in-memory image (used by tests and fuzzers); `bytes` must outlive the object.
  static StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(std::string_view label,
                                                               const std::byte* bytes, size_t size);

  const std::string& path() const { return path_; }
  // Entries sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* Find(std::string_view name) const;
  TensorView View(const SafetensorsEntry& entry) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> file_;  // null for FromBuffer
  const std::byte* data_ = nullptr;   // start of the data section
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint folder: `model.safetensors`, or the shards named by
// `model.safetensors.index.json` (its weight_map). A tensor name appearing in two files, or an
// index naming a tensor its shard lacks, is an error.
class SafetensorsCheckpoint {
 public:
  static StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& dir);

  struct Tensor {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
    TensorView view;
  };
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  const Tensor* Find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Tensor, std::less<>> tensors_;
};

struct NamedTensor {
  std::string name;
  TensorView view;
};

// Serialises tensors (in the given order; names must be unique) with optional string metadata.
StatusOr<std::string> SerializeSafetensors(const std::vector<NamedTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace vls

#endif  // VLSTACK_IO_SAFETENSORS_H_
