// Fuzz target for the safetensors reader (SafetensorsFile::FromBuffer).
//
// Every input must give either a Status or a file whose views lie inside the input; a file that
// is accepted must also serialise and parse back to the same tensors and metadata.
//
// Real fuzzing: scripts/fuzz.sh 600 safetensors. Without libFuzzer, `safetensors_fuzz_replay`
// (replay_main.cc, a ctest) runs this target over tests/corpus/safetensors and deterministic
// mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "io/safetensors.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "safetensors_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  auto file = vls::SafetensorsFile::FromBuffer("fuzz-input", bytes, size);
  if (!file.ok()) {
    if (file.status().message().find("fuzz-input") == std::string::npos) {
      Fail("error message does not name the input", file.status().ToString());
    }
    return 0;
  }

  // Touch every byte of every view; ASan reports any view that reaches outside the input.
  std::vector<vls::NamedTensor> tensors;
  uint64_t checksum = 0;
  for (const vls::SafetensorsEntry& e : (*file)->entries()) {
    const vls::TensorView v = (*file)->View(e);
    if (v.nbytes != static_cast<size_t>(v.numel()) * vls::DTypeSize(v.dtype)) {
      Fail("view size disagrees with its shape", e.name);
    }
    if (v.nbytes > 0 && (v.data < bytes || v.data + v.nbytes > bytes + size)) {
      Fail("view outside the input", e.name);
    }
    for (size_t i = 0; i < v.nbytes; ++i) checksum += static_cast<uint8_t>(v.data[i]);
    if (v.dtype != vls::DType::kI32) {
      for (float f : vls::ToF32Vector(v)) checksum += f == f ? 1 : 0;
    }
    if ((*file)->Find(e.name) != &e) Fail("Find does not return the entry", e.name);
    tensors.push_back({e.name, v});
  }

  // Round trip through the writer.
  auto image = vls::SerializeSafetensors(tensors, (*file)->metadata());
  if (!image.ok()) Fail("accepted file does not serialise", image.status().ToString());
  std::vector<std::byte> copy(image->size());  // heap memory: aligned like a mapped file
  std::memcpy(copy.data(), image->data(), image->size());
  auto again = vls::SafetensorsFile::FromBuffer("round-trip", copy.data(), copy.size());
  if (!again.ok()) Fail("serialised file does not parse", again.status().ToString());
  if ((*again)->metadata() != (*file)->metadata()) Fail("metadata changed", "");
  if ((*again)->entries().size() != tensors.size()) Fail("tensor count changed", "");
  for (const vls::NamedTensor& t : tensors) {
    const vls::SafetensorsEntry* e = (*again)->Find(t.name);
    if (e == nullptr) Fail("tensor lost in round trip", t.name);
    const vls::TensorView v = (*again)->View(*e);
    if (v.dtype != t.view.dtype || v.shape != t.view.shape || v.nbytes != t.view.nbytes ||
        (v.nbytes > 0 && std::memcmp(v.data, t.view.data, v.nbytes) != 0)) {
      Fail("tensor changed in round trip", t.name);
    }
  }
  volatile uint64_t sink = checksum;
  (void)sink;
  return 0;
}
