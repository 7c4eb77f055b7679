// The prepared-weights artifact: a file holding PreparedWeights' region behind a header that
// names its identity, so it is memory-mapped back instead of converted again at every load.
//
//   [0, 8)                 magic "VLSPREP1"
//   [8, 16)                header length h, u64 little-endian
//   [16, 16 + h)           header, JSON: {"format":"vlstack-prepared-weights","version":3,
//                          "identity":"<64 hex>","precision":"bf16","bounds":{...},
//                          "data_offset":X,"data_bytes":N,"data_xxh3_128":"<32 hex>",
//                          "entries":[{"name","dtype","rows","cols","offset","bytes"}, ...],
//                          and for a model with a vision tower
//                          "vision":{"offset":V,"bytes":M,"entries":[...]}}
//   [16 + h, X)            zero padding; X is a multiple of kPreparedAlign
//   [X, X + N)             the data; the file ends exactly there. Without "vision" it is the
//                          text decoder's region; with it, [X, X + V) is the text region (zero
//                          padded up to V, a multiple of kPreparedAlign) and [X + V, X + N) the
//                          vision tower's (PreparedVisionWeights), M = N - V. Entry offsets are
//                          relative to the start of their region.
//
// The identity is the LoadedModel identity (docs/contracts.md §1) of the model the artifact was
// compiled from; the loader recomputes it from the checkpoint and refuses a mismatch. The
// identity says which weights the file should hold; data_xxh3_128 (XXH3-128 of all N data
// bytes, the vision region included, big-endian hex) says that it holds them, so a zeroed or
// flipped byte is refused (kDataLoss) instead of answering with broken weights. It is checked at
// every load, which therefore reads the whole region (measured on a 936 MB bf16 artifact, 2 busy
// cores: load 0.04 s -> 0.9 s from the page cache, 0.2-0.4 s -> 2.3-3.4 s cold; XXH3 itself runs
// at 6.5 GB/s in memory, SHA-256 at 0.76 GB/s).
//
// Version history: 1 had no checksum (refused: "recompile"); 2 adds data_xxh3_128; 3 adds the
// optional "vision" section (version 2 files, which never have one, still load).
//
// The header is input from outside: it is parsed with ParseUntrustedJson (no duplicate keys,
// bounded nesting, nothing after the value) and read with the strict typed readers.
#ifndef VLSTACK_MODEL_PREPARED_ARTIFACT_H_
#define VLSTACK_MODEL_PREPARED_ARTIFACT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/prepared_weights.h"

namespace vls {

// The vision tower's section: its region is [data_offset + offset, data_offset + data_bytes).
struct ArtifactVisionSection {
  uint64_t offset = 0;  // from data_offset; a multiple of kPreparedAlign
  uint64_t bytes = 0;   // data_bytes - offset
  std::vector<PreparedEntry> entries;
};

// What the header says besides the entries.
struct ArtifactHeader {
  std::string identity;
  std::string precision;  // kernels::PrecisionName
  int capacity = 0, slots = 0, nmax = 0;
  uint64_t data_offset = 0, data_bytes = 0;
  std::string data_xxh3_128;  // 32 lowercase hex digits
  std::vector<PreparedEntry> entries;
  std::optional<ArtifactVisionSection> vision;
};

inline constexpr int kArtifactFormatVersion = 3;
// The oldest version still read (it differs only in having no vision section).
inline constexpr int kArtifactOldestReadableVersion = 2;

// XXH3-128 of bytes as 32 lowercase hex digits (high half first).
std::string Xxh3Hex(const void* data, size_t size);

// Writes `header` (its data_offset, data_bytes, checksum, entries and vision section are
// filled in here) and pw's region, then `vision`'s when not null, to `path` through
// base/file.h's OutputFile (a temporary file renamed onto the path; a symbolic link is written
// through). `progress(done, total)` counts written chunks.
Status WritePreparedArtifact(const std::string& path, ArtifactHeader header,
                             const PreparedWeights& pw, const PreparedRegion* vision,
                             const PrepareProgress& progress);
// The same without a vision tower.
Status WritePreparedArtifact(const std::string& path, ArtifactHeader header,
                             const PreparedWeights& pw, const PrepareProgress& progress);

// Parses and checks the header of an artifact file of `file_size` bytes whose first bytes are
// `prefix` (at least the whole header). Every error names `path` and what is wrong. Only the
// header: the checksum is verified by PreparedWeights::FromArtifact (VerifyArtifactData).
// Needs no model, so the fuzz target (fuzz/artifact_header_fuzz.cc) runs it on raw bytes.
StatusOr<ArtifactHeader> ParseArtifactHeader(const std::string& path, const std::byte* prefix,
                                             size_t prefix_size, uint64_t file_size);

// DataLoss (naming `path`) when `data[size]` does not hash to the header's data_xxh3_128.
Status VerifyArtifactData(const std::string& path, const ArtifactHeader& header,
                          const std::byte* data, uint64_t size);

}  // namespace vls

#endif  // VLSTACK_MODEL_PREPARED_ARTIFACT_H_
