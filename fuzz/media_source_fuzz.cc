// Fuzz target for image sources in chat requests (runtime/media_source.h): the input is an
// image part's JSON; ReadImagePart must give the image bytes or a Status, never read a file
// (files are not allowed here) and never exceed the byte bound. The same bytes as base64 text
// go through DecodeBase64, whose output must re-encode to the input.
//
// Real fuzzing: scripts/fuzz.sh 300 media_source. Without libFuzzer, `media_source_fuzz_replay`
// (a ctest) runs it over tests/corpus/media_source and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "io/untrusted_json.h"
#include "runtime/media_source.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "media_source_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  constexpr size_t kMax = 4096;
  auto decoded = vls::DecodeBase64(text, kMax);
  if (decoded.ok()) {
    if (decoded->size() > kMax) Fail("decoded past the bound", std::to_string(decoded->size()));
    // Canonical inputs round-trip; non-canonical padding bits are accepted but must decode to
    // the same length.
    if (vls::EncodeBase64(*decoded).size() != text.size()) Fail("length does not round-trip", text);
  }
  nlohmann::json part;
  if (!vls::ParseUntrustedJson("fuzz-part", text, &part).ok()) return 0;
  vls::MediaPolicy policy;  // files not allowed
  policy.max_bytes = kMax;
  auto m = vls::ReadImagePart(nlohmann::ordered_json::parse(part.dump()), policy);
  if (m.ok()) {
    if (m->bytes.size() > kMax) Fail("accepted more bytes than the bound", m->label);
    if (m->label.rfind("data URL", 0) != 0) Fail("read something that is not a data URL", m->label);
  }
  return 0;
}
