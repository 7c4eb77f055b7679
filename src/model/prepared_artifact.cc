#include "model/prepared_artifact.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/untrusted_json.h"

namespace vls {

namespace {

constexpr char kMagic[8] = {'V', 'L', 'S', 'P', 'R', 'E', 'P', '1'};
constexpr const char* kFormat = "vlstack-prepared-weights";
constexpr uint64_t kChunk = uint64_t{64} << 20;
// A header longer than this is not one vlstack wrote (about 120 bytes per entry).
constexpr uint64_t kMaxHeader = uint64_t{64} << 20;
// Bounds and shapes far beyond any model, so the arithmetic on them cannot overflow.
constexpr int64_t kMaxBound = int64_t{1} << 30;
constexpr int64_t kMaxDim = int64_t{1} << 40;

nlohmann::json EntriesJson(const std::vector<PreparedEntry>& list) {
  nlohmann::json entries = nlohmann::json::array();
  for (const PreparedEntry& e : list) {
    entries.push_back({{"name", e.name},
                       {"dtype", PreparedStorageName(e)},
                       {"rows", e.rows},
                       {"cols", e.cols},
                       {"offset", e.offset},
                       {"bytes", e.bytes}});
  }
  return entries;
}

nlohmann::json ToJson(const ArtifactHeader& h) {
  nlohmann::json j = {{"format", kFormat},
                      {"version", kArtifactFormatVersion},
                      {"identity", h.identity},
                      {"precision", h.precision},
                      {"bounds", {{"capacity", h.capacity}, {"slots", h.slots}, {"nmax", h.nmax}}},
                      {"data_offset", h.data_offset},
                      {"data_bytes", h.data_bytes},
                      {"data_xxh3_128", h.data_xxh3_128},
                      {"entries", EntriesJson(h.entries)}};
  if (h.vision) {
    j["vision"] = {{"offset", h.vision->offset},
                   {"bytes", h.vision->bytes},
                   {"entries", EntriesJson(h.vision->entries)}};
  }
  return j;
}

bool IsHex(const std::string& s, size_t digits) {
  if (s.size() != digits) return false;
  for (char c : s) {
    if ((c < '0' || c > '9') && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// Strict reads of the header's fields: every error is "bad header: <what is wrong>".
class HeaderReader {
 public:
  explicit HeaderReader(std::string what) : what_(std::move(what)) {}

  Status Bad(const std::string& detail) const {
    return InvalidArgument(what_ + "bad header: " + detail);
  }
  // The member `key` of object `obj` (named `where`), or an error when it is missing.
  StatusOr<const nlohmann::json*> Member(const nlohmann::json& obj, const std::string& where,
                                         const char* key) const {
    if (!obj.is_object()) return Bad(where + " is " + JsonTypeName(obj) + ", not an object");
    const auto it = obj.find(key);
    if (it == obj.end()) return Bad(where + " has no \"" + key + "\"");
    return &*it;
  }
  Status Int(const nlohmann::json& obj, const std::string& where, const char* key, int64_t min,
             int64_t max, int64_t* out) const {
    VLS_ASSIGN_OR_RETURN(const nlohmann::json* v, Member(obj, where, key));
    const Status s = ReadJsonInt(*v, key, min, max, out);
    return s.ok() ? s : Bad(s.message());
  }
  Status Str(const nlohmann::json& obj, const std::string& where, const char* key,
             std::string* out) const {
    VLS_ASSIGN_OR_RETURN(const nlohmann::json* v, Member(obj, where, key));
    const Status s = ReadJsonString(*v, key, out);
    return s.ok() ? s : Bad(s.message());
  }

 private:
  std::string what_;
};

// The array `list` (named `where`) of entries, each named `item` + its index in errors.
Status ReadEntries(const HeaderReader& r, const nlohmann::json& list, const std::string& where,
                   const std::string& item, std::vector<PreparedEntry>* out) {
  if (!list.is_array()) return r.Bad(where + " is " + JsonTypeName(list));
  int64_t v = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    const std::string at = item + std::to_string(i);
    PreparedEntry p;
    VLS_RETURN_IF_ERROR(r.Str(e, at, "name", &p.name));
    std::string dt;
    VLS_RETURN_IF_ERROR(r.Str(e, at, "dtype", &dt));
    if (const char* old = PreparedQ8OldLayout(dt); old != nullptr) {
      return r.Bad(item + "'" + p.name + "' is stored as '" + dt + "' (" + old +
                   ", from an older vlstack); this build reads '" + kQ8StorageName +
                   "' (32-column blocks with F16 scales) only: run vlstack compile again");
    }
    if (!ParsePreparedStorageName(dt, &p)) {
      return r.Bad(item + "'" + p.name + "' has unknown dtype '" + dt + "'");
    }
    VLS_RETURN_IF_ERROR(r.Int(e, at, "rows", 0, kMaxDim, &p.rows));
    VLS_RETURN_IF_ERROR(r.Int(e, at, "cols", 0, kMaxDim, &p.cols));
    VLS_RETURN_IF_ERROR(r.Int(e, at, "offset", 0, INT64_MAX, &v));
    p.offset = static_cast<uint64_t>(v);
    VLS_RETURN_IF_ERROR(r.Int(e, at, "bytes", 0, INT64_MAX, &v));
    p.bytes = static_cast<uint64_t>(v);
    out->push_back(std::move(p));
  }
  return Status::Ok();
}

// The header's fields after format and version (2 or 3) have been checked.
Status ReadHeaderFields(const HeaderReader& r, const nlohmann::json& j, int version,
                        ArtifactHeader* h) {
  VLS_RETURN_IF_ERROR(r.Str(j, "the header", "identity", &h->identity));
  VLS_RETURN_IF_ERROR(r.Str(j, "the header", "precision", &h->precision));
  VLS_ASSIGN_OR_RETURN(const nlohmann::json* b, r.Member(j, "the header", "bounds"));
  int64_t v = 0;
  VLS_RETURN_IF_ERROR(r.Int(*b, "bounds", "capacity", 0, kMaxBound, &v));
  h->capacity = static_cast<int>(v);
  VLS_RETURN_IF_ERROR(r.Int(*b, "bounds", "slots", 0, kMaxBound, &v));
  h->slots = static_cast<int>(v);
  VLS_RETURN_IF_ERROR(r.Int(*b, "bounds", "nmax", 0, kMaxBound, &v));
  h->nmax = static_cast<int>(v);
  VLS_RETURN_IF_ERROR(r.Int(j, "the header", "data_offset", 0, INT64_MAX, &v));
  h->data_offset = static_cast<uint64_t>(v);
  VLS_RETURN_IF_ERROR(r.Int(j, "the header", "data_bytes", 0, INT64_MAX, &v));
  h->data_bytes = static_cast<uint64_t>(v);
  VLS_RETURN_IF_ERROR(r.Str(j, "the header", "data_xxh3_128", &h->data_xxh3_128));
  VLS_ASSIGN_OR_RETURN(const nlohmann::json* entries, r.Member(j, "the header", "entries"));
  VLS_RETURN_IF_ERROR(ReadEntries(r, *entries, "entries", "entry ", &h->entries));
  const auto vision = j.find("vision");
  if (vision == j.end()) return Status::Ok();
  if (version < 3) return r.Bad("version " + std::to_string(version) + " has no vision section");
  ArtifactVisionSection vs;
  VLS_RETURN_IF_ERROR(r.Int(*vision, "vision", "offset", 0, INT64_MAX, &v));
  vs.offset = static_cast<uint64_t>(v);
  VLS_RETURN_IF_ERROR(r.Int(*vision, "vision", "bytes", 0, INT64_MAX, &v));
  vs.bytes = static_cast<uint64_t>(v);
  VLS_ASSIGN_OR_RETURN(const nlohmann::json* ve, r.Member(*vision, "vision", "entries"));
  VLS_RETURN_IF_ERROR(ReadEntries(r, *ve, "vision.entries", "vision entry ", &vs.entries));
  h->vision = std::move(vs);
  return Status::Ok();
}

// 32 lowercase hex digits, high half first.
std::string HexOf(const XXH128_hash_t& h) {
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return out;
}

void PutU64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}

uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

std::string Xxh3Hex(const void* data, size_t size) { return HexOf(XXH3_128bits(data, size)); }

Status WritePreparedArtifact(const std::string& path, ArtifactHeader header,
                             const PreparedWeights& pw, const PreparedRegion* vision,
                             const PrepareProgress& progress) {
  // The data: pw's region, then (with a vision tower) zeros up to an aligned offset and the
  // vision region.
  struct Piece {
    const std::byte* data;  // null: zeros
    uint64_t size;
  };
  std::vector<Piece> pieces = {{pw.data(), pw.size()}};
  header.entries = pw.entries();
  header.vision.reset();
  header.data_bytes = pw.size();
  if (vision != nullptr) {
    ArtifactVisionSection vs;
    vs.offset = (pw.size() + kPreparedAlign - 1) / kPreparedAlign * kPreparedAlign;
    vs.bytes = vision->size;
    vs.entries = vision->entries;
    pieces.push_back({nullptr, vs.offset - pw.size()});
    pieces.push_back({vision->data, vision->size});
    header.data_bytes = vs.offset + vs.bytes;
    header.vision = std::move(vs);
  }
  const std::vector<std::byte> zeros(kPreparedAlign);
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) return ResourceExhausted("out of memory for the artifact checksum");
  XXH3_128bits_reset(state);
  for (const Piece& p : pieces) {
    XXH3_128bits_update(state, p.data != nullptr ? p.data : zeros.data(), p.size);
  }
  header.data_xxh3_128 = HexOf(XXH3_128bits_digest(state));
  XXH3_freeState(state);
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

  VLS_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(path));
  VLS_RETURN_IF_ERROR(out->Append(head.data(), head.size()));
  int chunks = 0;
  for (const Piece& p : pieces) {
    if (p.data != nullptr) chunks += static_cast<int>((p.size + kChunk - 1) / kChunk);
  }
  int done = 0;
  for (const Piece& p : pieces) {
    if (p.data == nullptr) {
      VLS_RETURN_IF_ERROR(out->Append(zeros.data(), static_cast<size_t>(p.size)));
      continue;
    }
    for (uint64_t off = 0; off < p.size; off += kChunk) {
      VLS_RETURN_IF_ERROR(
          out->Append(p.data + off, static_cast<size_t>(std::min(kChunk, p.size - off))));
      if (progress) progress(++done, chunks);
    }
  }
  return out->Commit();
}

Status WritePreparedArtifact(const std::string& path, ArtifactHeader header,
                             const PreparedWeights& pw, const PrepareProgress& progress) {
  return WritePreparedArtifact(path, std::move(header), pw, nullptr, progress);
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
  const HeaderReader r(what);
  nlohmann::json j;
  JsonParseOptions po;
  po.code = StatusCode::kInvalidArgument;
  const Status parsed = ParseUntrustedJson(
      "header",
      std::string_view(reinterpret_cast<const char*>(prefix) + 16, static_cast<size_t>(len)), &j,
      po);
  if (!parsed.ok()) {
    return Status(parsed.code(), what + "bad header: " + parsed.message());
  }
  std::string format;
  VLS_RETURN_IF_ERROR(r.Str(j, "the header", "format", &format));
  if (format != kFormat) return InvalidArgument(what + "format is not " + kFormat);
  VLS_ASSIGN_OR_RETURN(const nlohmann::json* version, r.Member(j, "the header", "version"));
  const bool readable = version->is_number_integer() &&
                        *version >= kArtifactOldestReadableVersion &&
                        *version <= kArtifactFormatVersion;
  if (!readable) {
    const std::string v = JsonSnippet(*version);
    if (version->is_number_integer() && *version >= 1 && *version < kArtifactFormatVersion) {
      return InvalidArgument(what + "format version " + v +
                             " is not supported: it was compiled by an older vlstack (this one "
                             "reads versions " +
                             std::to_string(kArtifactOldestReadableVersion) + " to " +
                             std::to_string(kArtifactFormatVersion) +
                             ", which checksum the weights); recompile it with `vlstack "
                             "compile`");
    }
    return InvalidArgument(what + "version " + v + " is not supported (" +
                           std::to_string(kArtifactOldestReadableVersion) + " to " +
                           std::to_string(kArtifactFormatVersion) + " are)");
  }
  ArtifactHeader h;
  VLS_RETURN_IF_ERROR(ReadHeaderFields(r, j, version->get<int>(), &h));
  if (!IsHex(h.identity, 64)) return InvalidArgument(what + "identity is not 64 hex digits");
  if (!IsHex(h.data_xxh3_128, 32)) {
    return InvalidArgument(what + "data_xxh3_128 is not 32 lowercase hex digits");
  }
  if (h.data_offset % kPreparedAlign != 0 || h.data_offset < 16 + len) {
    return InvalidArgument(what + "data_offset " + std::to_string(h.data_offset) +
                           " is misaligned or overlaps the header");
  }
  if (h.data_offset > file_size || h.data_bytes != file_size - h.data_offset) {
    return InvalidArgument(what + "the file is " + std::to_string(file_size) +
                           " bytes but the header describes " + std::to_string(h.data_offset) +
                           " + " + std::to_string(h.data_bytes) + " (truncated or padded)");
  }
  if (h.vision && (h.vision->offset % kPreparedAlign != 0 || h.vision->offset > h.data_bytes ||
                   h.vision->bytes != h.data_bytes - h.vision->offset)) {
    return InvalidArgument(what + "the vision section at " + std::to_string(h.vision->offset) +
                           " + " + std::to_string(h.vision->bytes) +
                           " is misaligned or is not the rest of the data (" +
                           std::to_string(h.data_bytes) + " bytes)");
  }
  return h;
}

Status VerifyArtifactData(const std::string& path, const ArtifactHeader& header,
                          const std::byte* data, uint64_t size) {
  const std::string got = Xxh3Hex(data, static_cast<size_t>(size));
  if (got == header.data_xxh3_128) return Status::Ok();
  return DataLoss("artifact " + path +
                  ": the prepared weights do not match their checksum (data_xxh3_128 " +
                  header.data_xxh3_128 + " in the header, " + got +
                  " computed): the file is corrupt; compile it again");
}

StatusOr<std::unique_ptr<PreparedWeights>> PreparedWeights::FromArtifact(
    const std::string& path, const Qwen3Config& cfg, const Qwen3Weights& w,
    kernels::Precision precision, ArtifactMemory memory) {
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
      return InvalidArgument(what + "prepared matrix " + std::to_string(i) + " ('" + a.name + "' " +
                             PreparedStorageName(a) + " [" + std::to_string(a.rows) + ", " +
                             std::to_string(a.cols) +
                             "]) does not match this model's layout (expected '" + b.name + "' " +
                             PreparedStorageName(b) + " [" + std::to_string(b.rows) + ", " +
                             std::to_string(b.cols) + "])");
    }
  }
  std::unique_ptr<PreparedWeights> pw(new PreparedWeights());
  pw->size_ = h.vision ? h.vision->offset : h.data_bytes;
  pw->entries_ = std::move(h.entries);
  pw->artifact_identity_ = std::move(h.identity);
  pw->artifact_bounds_ = "capacity " + std::to_string(h.capacity) + ", slots " +
                         std::to_string(h.slots) + ", nmax " + std::to_string(h.nmax);
  std::shared_ptr<const void> owner;
  if (memory == ArtifactMemory::kCopy) {
    // Read into huge pages with pread (the file's pages are never mapped here; ADR 0033), in
    // chunks, then checksum the copy.
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<HugeRegion> region,
                         HugeRegion::Allocate(static_cast<size_t>(h.data_bytes)));
    for (uint64_t off = 0; off < h.data_bytes; off += kChunk) {
      const uint64_t n = std::min(kChunk, h.data_bytes - off);
      VLS_RETURN_IF_ERROR(file->ReadAt(file->data() + h.data_offset + off, static_cast<size_t>(n),
                                       region->data() + off));
    }
    (void)region->Collapse();  // pages faulted in while memory was fragmented
    pw->data_ = region->data();
    std::shared_ptr<const HugeRegion> shared(std::move(region));
    pw->artifact_copy_ = shared;
    owner = std::move(shared);
  } else {
    pw->data_ = file->data() + h.data_offset;
    // Start reading the region in now rather than on the first token; the checksum reads it.
    AdviseWillNeed(pw->data_, h.data_bytes);
    pw->file_ = std::move(file);
    owner = pw->file_;
  }
  VLS_RETURN_IF_ERROR(VerifyArtifactData(path, h, pw->data_, h.data_bytes));
  if (h.vision) {
    pw->artifact_vision_ = PreparedRegion{std::move(h.vision->entries),
                                          pw->data_ + h.vision->offset, h.vision->bytes, owner};
  }
  VLS_RETURN_IF_ERROR(pw->BindEntries(cfg).WithContext("artifact " + path));
  return pw;
}

}  // namespace vls
