#include "model/prepared_artifact.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace vls {

namespace {

constexpr char kMagic[8] = {'V', 'L', 'S', 'P', 'R', 'E', 'P', '1'};
constexpr const char* kFormat = "vlstack-prepared-weights";
constexpr int kVersion = 1;
constexpr uint64_t kChunk = uint64_t{64} << 20;
// A header longer than this is not one vlstack wrote (about 120 bytes per entry).
constexpr uint64_t kMaxHeader = uint64_t{64} << 20;

nlohmann::json ToJson(const ArtifactHeader& h) {
  nlohmann::json entries = nlohmann::json::array();
  for (const PreparedEntry& e : h.entries) {
    entries.push_back({{"name", e.name},
                       {"dtype", PreparedStorageName(e)},
                       {"rows", e.rows},
                       {"cols", e.cols},
                       {"offset", e.offset},
                       {"bytes", e.bytes}});
  }
  return {{"format", kFormat},
          {"version", kVersion},
          {"identity", h.identity},
          {"precision", h.precision},
          {"bounds", {{"capacity", h.capacity}, {"slots", h.slots}, {"nmax", h.nmax}}},
          {"data_offset", h.data_offset},
          {"data_bytes", h.data_bytes},
          {"entries", entries}};
}

bool IsHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if ((c < '0' || c > '9') && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// Reads header fields; throws nlohmann::json exceptions on wrong types or missing keys.
ArtifactHeader FromJson(const nlohmann::json& j) {
  ArtifactHeader h;
  h.identity = j.at("identity").get<std::string>();
  h.precision = j.at("precision").get<std::string>();
  const nlohmann::json& b = j.at("bounds");
  h.capacity = b.at("capacity").get<int>();
  h.slots = b.at("slots").get<int>();
  h.nmax = b.at("nmax").get<int>();
  h.data_offset = j.at("data_offset").get<uint64_t>();
  h.data_bytes = j.at("data_bytes").get<uint64_t>();
  for (const nlohmann::json& e : j.at("entries")) {
    PreparedEntry p;
    p.name = e.at("name").get<std::string>();
    const std::string dt = e.at("dtype").get<std::string>();
    if (!ParsePreparedStorageName(dt, &p)) {
      throw std::invalid_argument("entry '" + p.name + "' has unknown dtype '" + dt + "'");
    }
    p.rows = e.at("rows").get<int64_t>();
    p.cols = e.at("cols").get<int64_t>();
    p.offset = e.at("offset").get<uint64_t>();
    p.bytes = e.at("bytes").get<uint64_t>();
    h.entries.push_back(std::move(p));
  }
  return h;
}

void PutU64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}

uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Status WriteAll(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (std::fwrite(data, 1, n, f) != n) {
    return IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

Status WritePreparedArtifact(const std::string& path, ArtifactHeader header,
                             const PreparedWeights& pw, const PrepareProgress& progress) {
  header.entries = pw.entries();
  header.data_bytes = pw.size();
  // The header's own length depends on data_offset's digits: size it with a generous guess.
  header.data_offset = 0;
  const uint64_t guess = ToJson(header).dump().size() + 64;
  header.data_offset = (16 + guess + kPreparedAlign - 1) / kPreparedAlign * kPreparedAlign;
  const std::string json = ToJson(header).dump();
  if (16 + json.size() > header.data_offset) return Internal("artifact header outgrew its space");
  std::string head(header.data_offset, '\0');
  std::memcpy(head.data(), kMagic, 8);
  PutU64(json.size(), head.data() + 8);
  std::memcpy(head.data() + 16, json.data(), json.size());

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return IoError("cannot create " + tmp + ": " + std::strerror(errno));
  Status s = WriteAll(f, head.data(), head.size(), tmp);
  const int chunks = static_cast<int>((pw.size() + kChunk - 1) / kChunk);
  for (int c = 0; s.ok() && c < chunks; ++c) {
    const uint64_t off = static_cast<uint64_t>(c) * kChunk;
    s = WriteAll(f, pw.data() + off, static_cast<size_t>(std::min(kChunk, pw.size() - off)), tmp);
    if (s.ok() && progress) progress(c + 1, chunks);
  }
  if (std::fclose(f) != 0 && s.ok())
    s = IoError("cannot write " + tmp + ": " + std::strerror(errno));
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = IoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

StatusOr<ArtifactHeader> ParseArtifactHeader(const std::string& path, const std::byte* prefix,
                                             size_t prefix_size, uint64_t file_size) {
  const std::string what = "artifact " + path + ": ";
  if (prefix_size < 16 || std::memcmp(prefix, kMagic, 8) != 0) {
    return InvalidArgument(what + "not a vlstack prepared-weights artifact (bad magic)");
  }
  const uint64_t len = GetU64(prefix + 8);
  if (len > kMaxHeader || len > prefix_size - 16) {
    return InvalidArgument(what + "header length " + std::to_string(len) +
                           " runs past the end of the file");
  }
  ArtifactHeader h;
  try {
    const nlohmann::json j =
        nlohmann::json::parse(reinterpret_cast<const char*>(prefix) + 16,
                              reinterpret_cast<const char*>(prefix) + 16 + len);
    if (j.at("format") != kFormat) return InvalidArgument(what + "format is not " + kFormat);
    if (j.at("version") != kVersion) {
      return InvalidArgument(what + "version " + j.at("version").dump() + " is not supported (" +
                             std::to_string(kVersion) + " is)");
    }
    h = FromJson(j);
  } catch (const std::exception& e) {
    return InvalidArgument(what + "bad header: " + e.what());
  }
  if (!IsHex64(h.identity)) return InvalidArgument(what + "identity is not 64 hex digits");
  if (h.data_offset % kPreparedAlign != 0 || h.data_offset < 16 + len) {
    return InvalidArgument(what + "data_offset " + std::to_string(h.data_offset) +
                           " is misaligned or overlaps the header");
  }
  if (h.data_offset > file_size || h.data_bytes != file_size - h.data_offset) {
    return InvalidArgument(what + "the file is " + std::to_string(file_size) +
                           " bytes but the header describes " + std::to_string(h.data_offset) +
                           " + " + std::to_string(h.data_bytes) + " (truncated or padded)");
  }
  return h;
}

StatusOr<std::unique_ptr<PreparedWeights>> PreparedWeights::FromArtifact(
    const std::string& path, const Qwen3Config& cfg, const Qwen3Weights& w,
    kernels::Precision precision) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  VLS_ASSIGN_OR_RETURN(ArtifactHeader h,
                       ParseArtifactHeader(path, file->data(), file->size(), file->size()));
  const std::string what = "artifact " + path + ": ";
  if (h.precision != kernels::PrecisionName(precision)) {
    return InvalidArgument(what + "compiled for precision " + h.precision +
                           " but the model is loaded with " + kernels::PrecisionName(precision));
  }
  const std::vector<PreparedEntry> plan = PlanPreparedEntries(cfg, w, precision);
  if (h.entries.size() != plan.size()) {
    return InvalidArgument(what + "has " + std::to_string(h.entries.size()) +
                           " prepared matrices; this model needs " + std::to_string(plan.size()));
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    const PreparedEntry& a = h.entries[i];
    const PreparedEntry& b = plan[i];
    if (a.name != b.name || a.dtype != b.dtype || a.format != b.format || a.rows != b.rows ||
        a.cols != b.cols || a.offset != b.offset || a.bytes != b.bytes) {
      return InvalidArgument(what + "prepared matrix " + std::to_string(i) + " ('" + a.name +
                             "') does not match this model's layout (expected '" + b.name + "' " +
                             std::string(DTypeName(b.dtype)) + " [" + std::to_string(b.rows) +
                             ", " + std::to_string(b.cols) + "])");
    }
  }
  std::unique_ptr<PreparedWeights> pw(new PreparedWeights());
  pw->data_ = file->data() + h.data_offset;
  pw->size_ = h.data_bytes;
  pw->entries_ = std::move(h.entries);
  pw->artifact_identity_ = std::move(h.identity);
  pw->artifact_bounds_ = "capacity " + std::to_string(h.capacity) + ", slots " +
                         std::to_string(h.slots) + ", nmax " + std::to_string(h.nmax);
  // Start reading the region in now rather than on the first token.
  AdviseWillNeed(pw->data_, pw->size_);
  pw->file_ = std::move(file);
  VLS_RETURN_IF_ERROR(pw->BindEntries(cfg).WithContext("artifact " + path));
  return pw;
}

}  // namespace vls
