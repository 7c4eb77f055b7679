// vision_encode_tool: runs the vision tower on pixel_values from a safetensors file and writes
// the docs/contracts.md §6 `vlstack vision` output tensors, for the NumPy oracle driver
// (tests/oracle/vision_cases.py). A test tool, not installed.
//
//   vision_encode_tool --model DIR --pixel-values IN.safetensors --output OUT.safetensors
//                      [--precision f32|bf16|int8] [--threads N] [--diagnostics] [--reference]
//
// IN holds pixel_values (f32/bf16/f16 [Np, patch_dim]) and image_grid_thw (i32 [n, 3]).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/qwen3_config.h"
#include "vision/vision_model.h"

namespace vls {
namespace {

struct Args {
  std::string model, input, output;
  kernels::Precision precision = kernels::Precision::kF32;
  int threads = 0;
  bool diagnostics = false, reference = false;
};

StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(f + " needs a value");
      return std::string(argv[++i]);
    };
    if (f == "--model") {
      VLS_ASSIGN_OR_RETURN(a.model, value());
    } else if (f == "--pixel-values") {
      VLS_ASSIGN_OR_RETURN(a.input, value());
    } else if (f == "--output") {
      VLS_ASSIGN_OR_RETURN(a.output, value());
    } else if (f == "--precision") {
      VLS_ASSIGN_OR_RETURN(std::string p, value());
      if (p == "f32") {
        a.precision = kernels::Precision::kF32;
      } else if (p == "bf16") {
        a.precision = kernels::Precision::kBF16;
      } else if (p == "int8") {
        a.precision = kernels::Precision::kInt8;
      } else {
        return InvalidArgument("--precision must be f32, bf16 or int8, not '" + p + "'");
      }
    } else if (f == "--threads") {
      VLS_ASSIGN_OR_RETURN(std::string t, value());
      a.threads = std::atoi(t.c_str());
    } else if (f == "--diagnostics") {
      a.diagnostics = true;
    } else if (f == "--reference") {
      a.reference = true;
    } else {
      return InvalidArgument("unknown flag '" + f + "'");
    }
  }
  if (a.model.empty() || a.input.empty() || a.output.empty()) {
    return InvalidArgument("--model, --pixel-values and --output are required");
  }
  return a;
}

Status Run(const Args& a) {
  VLS_ASSIGN_OR_RETURN(const Qwen3Config text, LoadQwen3Config(a.model));
  VLS_ASSIGN_OR_RETURN(const std::optional<VisionConfig> cfg, LoadVisionConfig(a.model, text));
  if (!cfg) return InvalidArgument(a.model + ": config.json declares no vision tower");
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> in, SafetensorsFile::Open(a.input));
  const SafetensorsEntry* pv = in->Find("pixel_values");
  const SafetensorsEntry* gt = in->Find("image_grid_thw");
  if (pv == nullptr || gt == nullptr) {
    return InvalidArgument(a.input + ": needs pixel_values and image_grid_thw");
  }
  const TensorView pview = in->View(*pv), gview = in->View(*gt);
  if (pview.dtype == DType::kI32 || pview.shape.size() != 2) {
    return InvalidArgument(a.input + ": pixel_values must be a float [Np, patch_dim] tensor");
  }
  if (gview.dtype != DType::kI32 || gview.shape.size() != 2 || gview.shape[1] != 3) {
    return InvalidArgument(a.input + ": image_grid_thw must be i32 [n, 3]");
  }
  std::vector<GridThw> grids;
  for (int64_t i = 0; i < gview.shape[0]; ++i) {
    const int32_t* g = gview.i32() + i * 3;
    grids.push_back({g[0], g[1], g[2]});
  }
  const std::vector<float> pixels = ToF32Vector(pview);
  if (pview.shape[1] != cfg->patch_dim()) {
    return InvalidArgument(a.input + ": pixel_values rows hold " + std::to_string(pview.shape[1]) +
                           " values; the model's patch holds " + std::to_string(cfg->patch_dim()));
  }
  const kernels::Context ctx(a.threads, a.precision);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<VisionModel> model, VisionModel::Load(a.model, *cfg, ctx));
  VisionDiagnostics diag;
  VisionDiagnostics* d = a.diagnostics ? &diag : nullptr;
  VLS_ASSIGN_OR_RETURN(const VisionOutput out,
                       a.reference ? model->ReferenceEncode(pixels, pview.shape[0], grids, d)
                                   : model->Encode(pixels, pview.shape[0], grids, d));

  const int64_t O = cfg->out_hidden, Dv = cfg->hidden, np = pview.shape[0];
  const auto K = static_cast<int64_t>(cfg->deepstack_visual_indexes.size());
  std::vector<HostTensor> owned;
  std::vector<NamedTensor> named;
  owned.reserve(8 + static_cast<size_t>(cfg->depth));
  const auto add = [&](const std::string& name, HostTensor t) {
    owned.push_back(std::move(t));
    named.push_back({name, owned.back().view()});
  };
  add("pixel_values", HostTensor::FromF32({np, cfg->patch_dim()}, pixels));
  add("image_grid_thw", HostTensor::Copy(gview));
  add("visual_embeds", HostTensor::FromF32({out.tokens, O}, out.embeds));
  add("deepstack_features", HostTensor::FromF32({K, out.tokens, O}, out.deepstack));
  if (d != nullptr && out.tokens > 0) {
    add("patch_embeds", HostTensor::FromF32({np, Dv}, diag.patch_embeds));
    add("pos_embeds", HostTensor::FromF32({np, Dv}, diag.pos_embeds));
    for (size_t j = 0; j < diag.blocks.size(); ++j) {
      add("vision_block." + std::to_string(j), HostTensor::FromF32({np, Dv}, diag.blocks[j]));
    }
  }
  return WriteSafetensors(a.output, named);
}

}  // namespace
}  // namespace vls

int main(int argc, char** argv) {
  try {
    auto args = vls::ParseArgs(argc, argv);
    if (!args.ok()) {
      std::fprintf(stderr, "vision_encode_tool: %s\n", args.status().ToString().c_str());
      return 2;
    }
    const vls::Status s = vls::Run(*args);
    if (!s.ok()) {
      std::fprintf(stderr, "vision_encode_tool: %s\n", s.ToString().c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vision_encode_tool: %s\n", e.what());
    return 1;
  }
  return 0;
}
