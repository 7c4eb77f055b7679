// The prepared-weights artifact: a file holding PreparedWeights' region behind a header that
// names its identity, so it is memory-mapped back instead of converted again at every load.
//
//   [0, 8)                 magic "VLSPREP1"
//   [8, 16)                header length h, u64 little-endian
//   [16, 16 + h)           header, JSON: {"format":"vlstack-prepared-weights","version":1,
//                          "identity":"<64 hex>","precision":"bf16","bounds":{...},
//                          "data_offset":X,"data_bytes":N,"entries":[{"name","dtype","rows",
//                          "cols","offset","bytes"}, ...]}
//   [16 + h, X)            zero padding; X is a multiple of kPreparedAlign
//   [X, X + N)             the region; the file ends exactly there
//
// The identity is the LoadedModel identity (CONTRACTS §1) of the model the artifact was
// compiled from; the loader recomputes it from the checkpoint and refuses a mismatch.
#ifndef VLSTACK_MODEL_PREPARED_ARTIFACT_H_
#define VLSTACK_MODEL_PREPARED_ARTIFACT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/prepared_weights.h"

namespace vls {

// What the header says besides the entries.
struct ArtifactHeader {
  std::string identity;
  std::string precision;  // kernels::PrecisionName
  int capacity = 0, slots = 0, nmax = 0;
  uint64_t data_offset = 0, data_bytes = 0;
  std::vector<PreparedEntry> entries;
};

// Writes `header` (its data_offset and data_bytes are filled in here) and pw's region to
// `path` through `path.tmp` and a rename. `progress(done, total)` counts written chunks.
Status WritePreparedArtifact(const std::string& path, ArtifactHeader header,
                             const PreparedWeights& pw, const PrepareProgress& progress);

// Parses and checks the header of an artifact file of `file_size` bytes whose first bytes are
// `prefix` (at least the whole header). Every error names `path` and what is wrong.
StatusOr<ArtifactHeader> ParseArtifactHeader(const std::string& path, const std::byte* prefix,
                                             size_t prefix_size, uint64_t file_size);

}  // namespace vls

#endif  // VLSTACK_MODEL_PREPARED_ARTIFACT_H_
