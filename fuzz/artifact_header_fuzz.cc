// Fuzz target for the prepared-artifact header (ParseArtifactHeader), the part of an artifact
// read before any model is involved, and the checksum check that follows it (VerifyArtifactData).
//
// The input is a whole artifact file. Every input must give either a Status whose message names
// the input, or a header whose data region lies exactly inside the input; an accepted header's
// checksum is then verified over that region (DataLoss or OK, never a read outside it).
//
// Real fuzzing: scripts/fuzz.sh 600 artifact_header. Without libFuzzer,
// `artifact_header_fuzz_replay` (replay_main.cc, a ctest) runs this target over
// tests/corpus/artifact_header and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/prepared_artifact.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "artifact_header_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  auto h = vls::ParseArtifactHeader("fuzz-input", bytes, size, size);
  if (!h.ok()) {
    if (h.status().message().find("fuzz-input") == std::string::npos) {
      Fail("error message does not name the input", h.status().ToString());
    }
    return 0;
  }
  if (h->data_offset > size || h->data_bytes != size - h->data_offset) {
    Fail("accepted header's region is not the rest of the file",
         std::to_string(h->data_offset) + " + " + std::to_string(h->data_bytes));
  }
  if (h->data_offset % vls::kPreparedAlign != 0) Fail("accepted a misaligned region", "");
  if (h->identity.size() != 64 || h->data_xxh3_128.size() != 32) {
    Fail("accepted a malformed identity or checksum", h->identity + " " + h->data_xxh3_128);
  }
  const vls::Status v =
      vls::VerifyArtifactData("fuzz-input", *h, bytes + h->data_offset, h->data_bytes);
  if (!v.ok() && (v.code() != vls::StatusCode::kDataLoss ||
                  v.message().find("fuzz-input") == std::string::npos)) {
    Fail("checksum failure is not a DataLoss naming the input", v.ToString());
  }
  // A mismatch must be reported exactly when the region's hash differs.
  const bool same = vls::Xxh3Hex(bytes + h->data_offset, h->data_bytes) == h->data_xxh3_128;
  if (same != v.ok()) Fail("checksum verdict disagrees with the hash", v.ToString());
  // Every field of an accepted header is in range.
  for (const vls::PreparedEntry& e : h->entries) {
    if (e.rows < 0 || e.cols < 0) Fail("accepted a negative shape", e.name);
  }
  return 0;
}
