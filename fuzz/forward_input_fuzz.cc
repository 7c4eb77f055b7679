// Fuzz target for the `forward` / `batch` input file (docs/contracts.md §6): the bytes of a
// safetensors file -> SafetensorsFile::FromBuffer -> PeekInput -> ReadRequestInput against two tiny
// models written once per process (Qwen3-VL with M-RoPE and DeepStack, and a 1-D Qwen3).
//
// Every input must give a Status or a request whose sizes agree with the model and the input:
// embeddings [S, H], positions [axes, S], decode tokens within the capacity. ASan/UBSan catch
// reads outside a tensor (image_grid_thw of shape [n,1]), and the capacity bound keeps a huge
// t in video_grid_thw or a huge K from being expanded.
//
// Real fuzzing: scripts/fuzz.sh 600 forward_input. Without libFuzzer, forward_input_fuzz_replay
// (a ctest) runs it over tests/corpus/forward_input and fixed-seed mutations.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/request_input.h"
#include "io/safetensors.h"
#include "model/qwen3_model.h"
#include "model/test_checkpoint.h"

namespace {

// The context capacity the requests are read against.
constexpr int64_t kCapacity = 4096;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "forward_input_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::unique_ptr<vls::Qwen3Model> TinyModel(const std::string& arch) {
  vls::TestModelSpec spec;
  spec.arch = arch;
  spec.hidden = 32;
  spec.layers = 2;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 16;
  spec.intermediate = 32;
  spec.vocab = 512;
  spec.deepstack = arch == "qwen3-vl" ? 2 : 0;
  spec.dtype = vls::DType::kF32;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("vls_forward_input_fuzz_" + arch + "_" + std::to_string(getpid())))
                              .string();
  vls::Status s = vls::WriteTestCheckpoint(dir, spec, false);
  if (!s.ok()) Fail("cannot write the tiny model", s.ToString());
  auto m = vls::Qwen3Model::Load(dir);
  if (!m.ok()) Fail("cannot load the tiny model", m.status().ToString());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return std::move(*m);
}

void Check(const vls::SafetensorsFile& file, const vls::Qwen3Model& model) {
  auto r = vls::cli::ReadRequestInput(file, model, kCapacity);
  if (!r.ok()) {
    if (r.status().message().empty()) Fail("error without a message", r.status().ToString());
    return;
  }
  const vls::Qwen3Config& cfg = model.config();
  const int64_t S = r->length;
  if (S < 1 || S + static_cast<int64_t>(r->decode_tokens.size()) > kCapacity) {
    Fail("accepted a request over the capacity", std::to_string(S));
  }
  if (static_cast<int64_t>(r->embeddings.size()) != S * cfg.hidden) {
    Fail("embeddings are not [S, H]", std::to_string(r->embeddings.size()));
  }
  const int64_t axes = cfg.position_mode == vls::PositionMode::kMrope ? 3 : 1;
  if (r->positions.length != S || static_cast<int64_t>(r->positions.data.size()) != axes * S ||
      r->positions.mode != cfg.position_mode) {
    Fail("positions are not [axes, S]", std::to_string(r->positions.data.size()));
  }
  if (r->has_ids && static_cast<int64_t>(r->ids.size()) != S) Fail("input_ids are not [S]", "");
  for (int32_t t : r->decode_tokens) {
    if (t < 0 || t >= cfg.vocab) Fail("decode token outside the vocabulary", std::to_string(t));
  }
  // The batch path over the same file.
  vls::cli::BatchLine line;
  line.max_new_tokens = 8;
  auto g = vls::cli::BatchRequestFromInput(file, line, model, kCapacity);
  if (g.ok() && !r->decode_tokens.empty()) Fail("batch accepted decode_tokens", "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<vls::Qwen3Model> vl = TinyModel("qwen3-vl");
  static const std::unique_ptr<vls::Qwen3Model> text = TinyModel("qwen3");
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  auto file = vls::SafetensorsFile::FromBuffer("fuzz-input", bytes, size);
  if (!file.ok()) return 0;
  Check(**file, *vl);
  Check(**file, *text);
  return 0;
}
