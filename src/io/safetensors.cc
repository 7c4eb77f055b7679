#include "io/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "base/checked_math.h"
#include "base/file.h"
#include "io/untrusted_json.h"

namespace vls {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // Hugging Face's limit
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleFileName = "model.safetensors";

// Quotes a name taken from an untrusted file for an error message: control bytes are escaped and
// very long names are cut, so a hostile header cannot flood or garble a log.
std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

// A short rendering of a JSON value for an error message.
std::string Snippet(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
}

// A half-open byte range, "[4,8)".
std::string Bytes(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + ")";
}

// Parses untrusted JSON (io/untrusted_json.h: no NUL, no trailing bytes, bounded nesting, no
// repeated key); `label` prefixes error messages.
Status ParseJson(std::string_view label, const char* begin, const char* end, Json* out) {
  return ParseUntrustedJson(label, std::string_view(begin, end - begin), out);
}

// Reads a JSON integer in [0, max]; false for negatives, fractions and non-numbers.
bool GetUnsigned(const Json& v, uint64_t max, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return *out <= max;
}

bool IsKnownSafetensorsDType(std::string_view name) {
  static constexpr std::string_view kKnown[] = {
      "BOOL",    "U8",      "I8",  "I16",         "U16",        "I32",     "U32",
      "I64",     "U64",     "F64", "F8_E4M3",     "F8_E5M2",    "F8_E8M0", "F4",
      "F6_E2M3", "F6_E3M2", "C64", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};
  return std::find(std::begin(kKnown), std::end(kKnown), name) != std::end(kKnown);
}

// Parses one tensor's JSON object into `e` (name already set); `where` is "path: tensor 'x'".
Status ParseTensorFields(const std::string& where, const Json& v, SafetensorsEntry* e) {
  if (!v.is_object()) {
    return DataLoss(where + ": must be an object with dtype, shape and data_offsets, got " +
                    Snippet(v));
  }
  for (const auto& [k, unused] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      return DataLoss(where + ": unexpected field " + Quote(k) +
                      " (a tensor has exactly dtype, shape and data_offsets)");
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) return DataLoss(where + ": missing \"" + field + "\"");
  }

  const Json& dtype = v["dtype"];
  if (!dtype.is_string())
    return DataLoss(where + ": \"dtype\" must be a string, got " + Snippet(dtype));
  const auto& dtype_name = dtype.get_ref<const std::string&>();
  if (!ParseDTypeName(dtype_name, &e->dtype)) {
    if (IsKnownSafetensorsDType(dtype_name)) {
      return Unimplemented(where + ": dtype " + dtype_name +
                           " is not supported (vlstack reads F32, I32, BF16, F16 and F8_E4M3)");
    }
    return DataLoss(where + ": unknown dtype " + Quote(dtype_name));
  }

  const Json& shape = v["shape"];
  if (!shape.is_array())
    return DataLoss(where + ": \"shape\" must be an array, got " + Snippet(shape));
  e->shape.clear();
  e->shape.reserve(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = 0;
    if (!GetUnsigned(shape[i], std::numeric_limits<int64_t>::max(), &dim)) {
      return DataLoss(where + ": shape[" + std::to_string(i) + "] is " + Snippet(shape[i]) +
                      "; dims must be integers in [0, 2^63)");
    }
    e->shape.push_back(static_cast<int64_t>(dim));
  }

  const Json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 ||
      !GetUnsigned(offsets[0], std::numeric_limits<uint64_t>::max(), &e->begin) ||
      !GetUnsigned(offsets[1], std::numeric_limits<uint64_t>::max(), &e->end)) {
    return DataLoss(where +
                    ": \"data_offsets\" must be [begin, end] with non-negative integers, got " +
                    Snippet(offsets));
  }
  return Status::Ok();
}

// Byte size of a tensor; nullopt for a negative dim or when the byte count of the non-zero dims
// exceeds INT64_MAX. Leaving zero dims out means a zero-element tensor cannot carry dims whose
// product (and so any stride computed from them) overflows.
std::optional<uint64_t> ByteCount(std::span<const int64_t> shape, uint64_t elem_size) {
  Shape nonzero;
  std::copy_if(shape.begin(), shape.end(), std::back_inserter(nonzero),
               [](int64_t d) { return d != 0; });
  const auto bound = CheckedByteCount(nonzero, elem_size);  // also rejects negative dims
  if (!bound || *bound > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return CheckedByteCount(shape, elem_size);  // <= bound, cannot overflow
}

// Checks a tensor's byte range against its shape, the data section and alignment.
Status CheckTensorRange(const std::string& where, const SafetensorsEntry& e, const std::byte* data,
                        uint64_t data_size) {
  const std::string offsets = "data_offsets " + Range(e.begin, e.end);
  if (e.begin > e.end) return DataLoss(where + ": " + offsets + " begin after end");
  if (e.end > data_size) {
    return DataLoss(where + ": " + offsets + " end past the data section of " +
                    std::to_string(data_size) + " bytes");
  }
  const uint64_t elem = DTypeSize(e.dtype);
  const std::string what = std::string(DTypeName(e.dtype)) + " shape " + ShapeToString(e.shape);
  const auto need_or = ByteCount(e.shape, elem);
  if (!need_or) return DataLoss(where + ": " + what + " overflows a 64-bit byte count");
  const uint64_t need = *need_or;
  const uint64_t have = e.end - e.begin;
  if (have != need) {
    return DataLoss(where + ": " + offsets + " hold " + std::to_string(have) + " bytes but " +
                    what + " needs " + std::to_string(need));
  }
  const auto address = reinterpret_cast<uintptr_t>(data) + e.begin;
  if (have > 0 && address % elem != 0) {
    return Unimplemented(where + ": data at " + offsets + " is not aligned to its " +
                         std::to_string(elem) +
                         "-byte element size (vlstack maps tensors zero-copy; re-save the file "
                         "with safetensors >= 0.3 or vlstack)");
  }
  return Status::Ok();
}

// Checks that the tensors tile the data section exactly: no overlap, no hole.
Status CheckCoverage(const std::string& label, const std::vector<SafetensorsEntry>& entries,
                     uint64_t data_size) {
  std::vector<const SafetensorsEntry*> order;
  order.reserve(entries.size());
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : order) {
    const std::string where = label + ": tensor " + Quote(e->name) + ": ";
    if (e->begin < expected) {
      return DataLoss(where + "data_offsets " + Range(e->begin, e->end) + " start inside tensor " +
                      Quote(prev->name) + " " + Range(prev->begin, prev->end) +
                      " (byte ranges overlap)");
    }
    if (e->begin > expected) {
      return DataLoss(where + "data section bytes " + Bytes(expected, e->begin) +
                      " before it belong to no tensor (a hole " +
                      (prev ? "after tensor " + Quote(prev->name) : std::string("at the start")) +
                      ")");
    }
    expected = e->end;
    prev = e;
  }
  if (expected != data_size) {
    const std::string hole = "data section bytes " + Bytes(expected, data_size);
    if (prev == nullptr)
      return DataLoss(label + ": " + hole + " belong to no tensor (none listed)");
    return DataLoss(label + ": tensor " + Quote(prev->name) + ": " + hole +
                    " after it belong to no tensor (a hole at the end)");
  }
  return Status::Ok();
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name.find('/') == std::string_view::npos &&
         name.find('\\') == std::string_view::npos && name.find("..") == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const std::byte* bytes = file->data();
  const size_t size = file->size();
  return Parse(path, std::move(file), bytes, size);
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(std::string_view label,
                                                                       const std::byte* bytes,
                                                                       size_t size) {
  return Parse(std::string(label), nullptr, bytes, size);
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::string label,
                                                                  std::unique_ptr<MappedFile> file,
                                                                  const std::byte* bytes,
                                                                  size_t size) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(label);
  f->file_ = std::move(file);
  Status s;
  // nlohmann::json may throw (bad_alloc, or a bug); nothing may escape to the caller.
  try {
    s = f->ParseHeader(bytes, size);
  } catch (const std::bad_alloc&) {
    s = ResourceExhausted(f->path_ + ": out of memory while parsing the safetensors header");
  } catch (const std::exception& e) {
    s = DataLoss(f->path_ + ": cannot parse the safetensors header: " + e.what());
  } catch (...) {
    s = DataLoss(f->path_ + ": cannot parse the safetensors header");
  }
  if (!s.ok()) return s;
  return f;
}

Status SafetensorsFile::ParseHeader(const std::byte* bytes, size_t size) {
  if (size < 8) {
    return DataLoss(path_ + ": file is " + std::to_string(size) +
                    " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  if (n > size - 8) {
    return DataLoss(path_ + ": header length " + std::to_string(n) +
                    " runs past the end of the file (" + std::to_string(size) + " bytes)");
  }
  if (n > kMaxHeaderBytes) {
    return OutOfRange(path_ + ": header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes");
  }
  const auto* json_begin = reinterpret_cast<const char*>(bytes + 8);
  Json header;
  VLS_RETURN_IF_ERROR(ParseJson(path_ + ": header", json_begin, json_begin + n, &header));
  if (!header.is_object()) {
    return DataLoss(path_ + ": header must be a JSON object, got " + Snippet(header));
  }

  data_ = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  entries_.reserve(header.size());
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        return DataLoss(path_ + ": \"__metadata__\" must be an object of strings, got " +
                        Snippet(value));
      }
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return DataLoss(path_ + ": \"__metadata__\" key " + Quote(k) +
                          " must map to a string, got " + Snippet(v));
        }
        metadata_.emplace(k, v.get<std::string>());
      }
      continue;
    }
    const std::string where = path_ + ": tensor " + Quote(name);
    SafetensorsEntry e;
    e.name = name;
    VLS_RETURN_IF_ERROR(ParseTensorFields(where, value, &e));
    VLS_RETURN_IF_ERROR(CheckTensorRange(where, e, data_, data_size));
    entries_.push_back(std::move(e));
  }
  VLS_RETURN_IF_ERROR(CheckCoverage(path_, entries_, data_size));
  std::sort(entries_.begin(), entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  return Status::Ok();
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(
      entries_.begin(), entries_.end(), name,
      [](const SafetensorsEntry& e, std::string_view n) { return std::string_view(e.name) < n; });
  if (it == entries_.end() || it->name != name) return nullptr;
  return &*it;
}

TensorView SafetensorsFile::View(const SafetensorsEntry& entry) const {
  return {entry.dtype, entry.shape, data_ + entry.begin,
          static_cast<size_t>(entry.end - entry.begin)};
}

StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return NotFound("checkpoint folder '" + dir + "' does not exist");
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("checkpoint path '" + dir + "' is not a folder");

  std::unique_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  const std::string index_path = JoinPath(dir, kIndexName);
  if (::stat(index_path.c_str(), &st) != 0) {
    const std::string path = JoinPath(dir, kSingleFileName);
    auto file = SafetensorsFile::Open(path);
    if (!file.ok() && file.status().code() == StatusCode::kNotFound) {
      return NotFound("checkpoint folder '" + dir + "' has neither " + std::string(kIndexName) +
                      " nor " + std::string(kSingleFileName) + " ('" + path + "' not found)");
    }
    if (!file.ok()) return file.status();
    ckpt->files_.push_back(std::move(file).value());
  } else {
    VLS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    Json index;
    VLS_RETURN_IF_ERROR(ParseJson(index_path, text.data(), text.data() + text.size(), &index));
    const Json* weight_map = nullptr;
    if (index.is_object()) {
      auto it = index.find("weight_map");
      if (it != index.end()) weight_map = &*it;
    }
    if (weight_map == nullptr || !weight_map->is_object() || weight_map->empty()) {
      return DataLoss(index_path +
                      ": must be a JSON object with a non-empty \"weight_map\" object");
    }
    // Shard file name -> index into files_; each shard is opened once.
    std::map<std::string, size_t> shard_ids;
    for (const auto& [name, shard] : weight_map->items()) {
      const std::string where = index_path + ": tensor " + Quote(name);
      if (!shard.is_string()) {
        return DataLoss(where + ": weight_map value must be a shard file name, got " +
                        Snippet(shard));
      }
      const auto& shard_name = shard.get_ref<const std::string&>();
      if (!IsPlainFileName(shard_name)) {
        return DataLoss(where + ": shard " + Quote(shard_name) +
                        " must be a plain file name inside the checkpoint folder (no '/', '\\' "
                        "or '..')");
      }
      if (shard_ids.count(shard_name)) continue;
      auto file = SafetensorsFile::Open(JoinPath(dir, shard_name));
      if (!file.ok() && file.status().code() == StatusCode::kNotFound) {
        return file.status().WithContext(where + ": shard " + Quote(shard_name) + " is missing");
      }
      if (!file.ok()) return file.status();
      shard_ids.emplace(shard_name, ckpt->files_.size());
      ckpt->files_.push_back(std::move(file).value());
    }
    // Every tensor the index names is in the shard it names.
    for (const auto& [name, shard] : weight_map->items()) {
      const SafetensorsFile& file = *ckpt->files_[shard_ids.at(shard.get<std::string>())];
      if (file.Find(name) == nullptr) {
        return DataLoss(index_path + ": tensor " + Quote(name) + ": the index places it in '" +
                        file.path() + "', which has no such tensor");
      }
    }
    // Every tensor in a shard is in the index (a tensor in two shards is reported below).
    for (const auto& file : ckpt->files_) {
      for (const auto& e : file->entries()) {
        if (!weight_map->contains(e.name)) {
          return DataLoss(file->path() + ": tensor " + Quote(e.name) +
                          " is not listed in the weight_map of " + index_path);
        }
      }
    }
  }

  for (const auto& file : ckpt->files_) {
    for (const auto& e : file->entries()) {
      auto [it, inserted] = ckpt->tensors_.emplace(e.name, Tensor{file.get(), &e, file->View(e)});
      if (!inserted) {
        return DataLoss(file->path() + ": tensor " + Quote(e.name) + " is also in '" +
                        it->second.file->path() + "' (a tensor may live in only one shard)");
      }
    }
  }
  return ckpt;
}

std::vector<std::string> SafetensorsCheckpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, unused] : tensors_) names.push_back(name);
  return names;
}

const SafetensorsCheckpoint::Tensor* SafetensorsCheckpoint::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

// A checked file of `tensors`: its 8-byte length and JSON header, then the tensors' bytes in
// `order`.
struct SafetensorsPlan {
  std::string head;  // the 8-byte length and the header
  std::vector<size_t> order;
  uint64_t data_size = 0;
};

StatusOr<SafetensorsPlan> PlanSafetensors(const std::vector<NamedTensor>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const NamedTensor& t : tensors) {
    const std::string where = "tensor " + Quote(t.name);
    if (t.name == kMetadataKey) return InvalidArgument(where + ": name is reserved for metadata");
    if (!seen.insert(t.name).second) return InvalidArgument(where + ": listed twice");
    const size_t elem = DTypeSize(t.view.dtype);
    if (elem == 0) return InvalidArgument(where + ": invalid dtype");
    const auto need = ByteCount(t.view.shape, elem);
    if (!need || *need != t.view.nbytes) {
      return InvalidArgument(where + ": view holds " + std::to_string(t.view.nbytes) +
                             " bytes but " + std::string(DTypeName(t.view.dtype)) + " shape " +
                             ShapeToString(t.view.shape) + " needs " +
                             (need ? std::to_string(*need) : std::string("more than 2^63")));
    }
    if (t.view.nbytes > 0 && t.view.data == nullptr) {
      return InvalidArgument(where + ": view has no data");
    }
  }

  // Data layout: larger elements first, stable otherwise, so every tensor stays aligned.
  std::vector<size_t> layout(tensors.size());
  for (size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return DTypeSize(tensors[a].view.dtype) > DTypeSize(tensors[b].view.dtype);
  });
  std::vector<uint64_t> begins(tensors.size());
  uint64_t data_size = 0;
  for (size_t i : layout) {
    begins[i] = data_size;
    data_size += tensors[i].view.nbytes;  // cannot overflow: the views are in memory
  }

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& v = tensors[i].view;
    header[tensors[i].name] = {
        {"dtype", std::string(DTypeName(v.dtype))},
        {"shape", v.shape},
        {"data_offsets", nlohmann::ordered_json::array({begins[i], begins[i] + v.nbytes})}};
  }
  std::string json;
  try {
    json = header.dump();  // throws on invalid UTF-8
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("tensor names and metadata must be valid UTF-8: ") +
                           e.what());
  }
  json.append((8 - (json.size() % 8)) % 8, ' ');  // 8 + N is a multiple of 8

  SafetensorsPlan plan;
  plan.head.reserve(8 + json.size());
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) plan.head.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  plan.head += json;
  plan.order = std::move(layout);
  plan.data_size = data_size;
  return plan;
}

}  // namespace

StatusOr<std::string> SerializeSafetensors(const std::vector<NamedTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  VLS_ASSIGN_OR_RETURN(SafetensorsPlan plan, PlanSafetensors(tensors, metadata));
  std::string out;
  out.reserve(plan.head.size() + plan.data_size);
  out += plan.head;
  for (size_t i : plan.order) {
    const TensorView& v = tensors[i].view;
    if (v.nbytes > 0) out.append(reinterpret_cast<const char*>(v.data), v.nbytes);
  }
  return out;
}

// Streams the header and each tensor to the file (no copy of the whole file in memory: a
// checkpoint writer holding one 2 GiB shard needs 2 GiB, not 4).
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  auto plan = PlanSafetensors(tensors, metadata);
  if (!plan.ok()) return plan.status().WithContext(path);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(path));
  VLS_RETURN_IF_ERROR(out->Append(plan->head.data(), plan->head.size()));
  for (size_t i : plan->order) {
    const TensorView& v = tensors[i].view;
    if (v.nbytes > 0) VLS_RETURN_IF_ERROR(out->Append(v.data, v.nbytes));
  }
  return out->Commit();
}

}  // namespace vls
