// Fuzz target for one line of a `vlstack batch` JSONL file (docs/contracts.md §6): ParseBatchLine,
// the output line written for it (DumpJsonSafe over the id and the error text), and, when the line
// names one of a few fixed input files, the request built from it (PeekInput, the token limit,
// BatchRequestFromInput) against a tiny Qwen3-VL written once per process.
//
// Every line must give a Status or a request within the limits; nothing may throw (an id nested
// 64 deep, error text with invalid UTF-8) and the output line must always serialise.
//
// Real fuzzing: scripts/fuzz.sh 600 batch_line. Without libFuzzer, batch_line_fuzz_replay (a
// ctest) runs it over tests/corpus/batch_line and fixed-seed mutations.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/request_input.h"
#include "io/safetensors.h"
#include "io/untrusted_json.h"
#include "model/qwen3_model.h"
#include "model/test_checkpoint.h"
#include "runtime/stop_matcher.h"

namespace {

constexpr int64_t kCapacity = 64;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "batch_line_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::unique_ptr<vls::Qwen3Model> TinyModel() {
  vls::TestModelSpec spec;
  spec.hidden = 32;
  spec.layers = 2;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 16;
  spec.intermediate = 32;
  spec.vocab = 512;
  spec.deepstack = 2;
  spec.dtype = vls::DType::kF32;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("vls_batch_line_fuzz_" + std::to_string(getpid())))
          .string();
  vls::Status s = vls::WriteTestCheckpoint(dir, spec, false);
  if (!s.ok()) Fail("cannot write the tiny model", s.ToString());
  auto m = vls::Qwen3Model::Load(dir);
  if (!m.ok()) Fail("cannot load the tiny model", m.status().ToString());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return std::move(*m);
}

std::string File(const std::vector<std::pair<std::string, vls::HostTensor>>& tensors) {
  std::vector<vls::NamedTensor> named;
  named.reserve(tensors.size());
  for (const auto& [name, t] : tensors) named.push_back({name, t.view()});
  auto image = vls::SerializeSafetensors(named);
  if (!image.ok()) Fail("cannot write a fixture", image.status().ToString());
  return *image;
}

// The input files a line may name (by these names only: the target never opens real files).
std::map<std::string, std::string> Fixtures(const vls::Qwen3Config& c) {
  using vls::HostTensor;
  std::map<std::string, std::string> f;
  const std::vector<int32_t> text = {5, 6, 7, 8, 9};
  f["text.safetensors"] = File({{"input_ids", HostTensor::FromI32({5}, text)}});
  std::vector<int32_t> image = {5, c.vision_start_token_id};
  for (int i = 0; i < 4; ++i) image.push_back(c.image_token_id);
  image.push_back(c.vision_end_token_id);
  const std::vector<int32_t> grid = {1, 4, 4};
  f["image.safetensors"] =
      File({{"input_ids", HostTensor::FromI32({static_cast<int64_t>(image.size())}, image)},
            {"image_grid_thw", HostTensor::FromI32({1, 3}, grid)}});
  f["decode.safetensors"] = File({{"input_ids", HostTensor::FromI32({5}, text)},
                                  {"decode_tokens", HostTensor::FromI32({2}, {text.data(), 2})}});
  const std::vector<int32_t> long_ids(60, 11);
  f["long.safetensors"] = File({{"input_ids", HostTensor::FromI32({60}, long_ids)}});
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<vls::Qwen3Model> model = TinyModel();
  static const std::map<std::string, std::string> fixtures = Fixtures(model->config());
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  vls::cli::BatchLine line;
  vls::Status s = vls::cli::ParseBatchLine("line 1", text, &line);
  // The output line of a refused request always serialises (docs/contracts.md §6 error line).
  nlohmann::json out;
  out["id"] = line.id;
  out["tokens"] = nlohmann::json::array();
  out["finish_reason"] = "error";
  out["error"] = s.ToString();
  if (vls::DumpJsonSafe(out).empty()) Fail("empty output line", "");
  if (!s.ok()) return 0;

  if (line.input.empty()) Fail("accepted a line without an input", "");
  if (line.max_new_tokens < 1) Fail("accepted max_new_tokens < 1", "");
  if (line.cancel_after && *line.cancel_after < 0) Fail("accepted a negative cancel", "");
  if (!vls::ValidateSamplingParams(line.sampling).ok()) Fail("accepted bad sampling", "");
  if (line.stop && !vls::ValidateStopStrings(*line.stop).ok()) Fail("accepted bad stop", "");
  const vls::VideoSamplingOptions& v = line.video;
  if (line.videos.empty() && (v.fps || v.max_frames || v.num_frames)) {
    Fail("accepted video sampling without videos", "");
  }
  if (v.fps && !(*v.fps > 0 && *v.fps <= 60)) Fail("accepted an fps out of bounds", "");
  for (const auto& n : {v.max_frames, v.num_frames}) {
    if (n && (*n < 1 || *n > 768)) Fail("accepted a frame count out of bounds", "");
  }
  if (v.fps && v.num_frames) Fail("accepted fps with num_frames", "");

  auto it = fixtures.find(line.input);
  if (it == fixtures.end()) return 0;
  auto file = vls::SafetensorsFile::FromBuffer(
      it->first, reinterpret_cast<const std::byte*>(it->second.data()), it->second.size());
  if (!file.ok()) Fail("fixture does not parse", file.status().ToString());
  auto lengths = vls::cli::PeekInput(**file);
  if (!lengths.ok()) Fail("fixture refused", lengths.status().ToString());
  const vls::Status fits = vls::cli::CheckRequestTokens(lengths->prompt, line.max_new_tokens,
                                                        "max_new_tokens", kCapacity, "capacity");
  auto r = vls::cli::BatchRequestFromInput(**file, line, *model, kCapacity);
  if (r.ok() != (fits.ok() && lengths->decode == 0)) {
    Fail("the request and the token limit disagree",
         fits.ToString() + " / " + r.status().ToString());
  }
  if (r.ok()) {
    const int64_t S = r->positions.length;
    if (S + r->max_new_tokens > kCapacity) Fail("request over the capacity", std::to_string(S));
  }
  return 0;
}
