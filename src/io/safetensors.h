// safetensors: memory-mapped, zero-copy reading (single files and sharded checkpoints) and writing.
//
// The header of a safetensors file is untrusted input. Open() checks every offset, size and
// dtype with overflow-safe arithmetic: a truncated, overlapping or lying file gives a Status
// naming the file and the tensor, never a crash.
//
// File format: an 8-byte little-endian u64 N, N bytes of JSON, then the data section. The JSON
// is an object; "__metadata__" (optional) maps strings to strings, every other key is a tensor
// {"dtype": "F32", "shape": [2,3], "data_offsets": [begin, end]} with offsets relative to the
// data section.
//
// Rules Open()/FromBuffer() enforce (all errors name the file, and the tensor where there is one):
//   * N <= file size - 8 (kDataLoss) and N <= 100 MiB (kOutOfRange), as Hugging Face's reader.
//   * The JSON parses, nests at most 64 deep and repeats no key inside one object (kDataLoss).
//     A repeated tensor name is an error rather than "last one wins" as in plain nlohmann::json.
//   * Each tensor object has exactly dtype, shape and data_offsets (kDataLoss). dtype is one of
//     F32, I32, BF16, F16, F8_E4M3; other safetensors dtypes (F64, I64, U8, F8_E5M2, ...) give
//     kUnimplemented. (An F8_E4M3 tensor's bytes are not checked here: every byte is a valid
//     code, and whether a NaN code is acceptable is the loader's rule, model/fp8_weights.h.)
//   * shape dims are integers in [0, 2^63); the element count times the element size (with zero
//     dims left out, so strides computed from the shape cannot overflow either) fits in 64 bits.
//   * begin <= end <= data section size, and end - begin == element count * element size.
//   * Sorted by begin, each tensor starts where the previous one ended and the last ends at the
//     end of the data section: no overlaps and no holes (Hugging Face's reader requires the same).
//   * Alignment: each non-empty tensor's data pointer must be aligned to its element size, else
//     kUnimplemented. Views are zero-copy and kernels read them as float/uint16_t/int32_t arrays,
//     so a misaligned tensor would be undefined behaviour; rather than copying silently we reject
//     it. Files written by WriteSafetensors and by safetensors >= 0.3 (which pads the header to a
//     multiple of 8 and orders data by descending element size) always pass when memory-mapped.
//     For FromBuffer the check applies to the caller's actual addresses.
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
  // `label` stands for the file path in error messages.
  static StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(std::string_view label,
                                                               const std::byte* bytes, size_t size);

  const std::string& path() const { return path_; }
  // Entries sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Returns null when the file has no tensor of that name.
  const SafetensorsEntry* Find(std::string_view name) const;
  // REQUIRES: `entry` is one of entries().
  TensorView View(const SafetensorsEntry& entry) const;
  // The file mapping the views point into; null for FromBuffer.
  const MappedFile* mapping() const { return file_.get(); }

 private:
  SafetensorsFile() = default;
  // Validates `size` bytes at `bytes` (owned by `file` when it is non-null).
  static StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::string label,
                                                          std::unique_ptr<MappedFile> file,
                                                          const std::byte* bytes, size_t size);
  Status ParseHeader(const std::byte* bytes, size_t size);

  std::string path_;
  std::unique_ptr<MappedFile> file_;  // null for FromBuffer
  const std::byte* data_ = nullptr;   // start of the data section
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint folder: `model.safetensors`, or the shards named by
// `model.safetensors.index.json` (its weight_map). A tensor name appearing in two files, or an
// index naming a tensor its shard lacks, is an error.
//
// Index rules (kDataLoss unless noted, messages name the index or shard and the tensor):
// weight_map is a non-empty object of tensor name -> shard file name; a shard name is a plain
// file name in `dir` (no '/', '\\' or "..", so an index cannot reach outside the folder); each
// shard is opened once; a missing shard is kNotFound; every tensor the index names is in its
// shard and every tensor in a shard is in the index. A missing folder, or a folder with neither
// file, is kNotFound. Thread safety: immutable after Open.
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
// The JSON header lists "__metadata__" (when non-empty) and then the tensors in the given order,
// padded with spaces so that 8 + N is a multiple of 8. The data section is contiguous with no
// padding; tensors of the same element size keep the given order, but larger element sizes come
// first (as Hugging Face's writer does) so that every tensor is aligned to its element size and
// the file passes Open()'s alignment rule. kInvalidArgument for duplicate or "__metadata__"
// names, names/metadata that are not valid UTF-8, or a view whose nbytes is not
// numel * element size.
StatusOr<std::string> SerializeSafetensors(const std::vector<NamedTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
// Serialises and writes atomically (a temporary file renamed over `path`).
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace vls

#endif  // VLSTACK_IO_SAFETENSORS_H_
