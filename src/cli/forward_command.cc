// `vlstack forward` (docs/contracts.md §6): one prefill plus optional decode, tensors in and out.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/image_request.h"
#include "cli/load_flags.h"
#include "cli/request_input.h"
#include "io/safetensors.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/session.h"

namespace vls::cli {
namespace {

// Records for --diagnostics the residual after every layer (post-hook; unless the DeepStack
// diagnostics entry returns them) and each sparse layer's routing of the prompt rows.
class CaptureHook : public LayerHook {
 public:
  void AfterLayer(int layer, float* x, int64_t M) override {
    (void)layer;
    if (capture_states) states.emplace_back(x, x + M * hidden);
  }
  void OnRouting(int layer, int64_t row0, const int32_t* e, const float* w, int64_t n,
                 int k) override {
    Routing& r = routing[layer];
    r.experts.resize(static_cast<size_t>(rows * k));
    r.weights.resize(r.experts.size());
    if (row0 < 0 || row0 + n > rows) return;  // not a prompt row (never, in one prefill)
    std::copy_n(e, n * k, r.experts.begin() + row0 * k);
    std::copy_n(w, n * k, r.weights.begin() + row0 * k);
  }
  struct Routing {
    std::vector<int32_t> experts;  // [S, k]
    std::vector<float> weights;    // [S, k]
  };
  int64_t hidden = 0;
  int64_t rows = 0;  // S
  bool capture_states = true;
  std::vector<std::vector<float>> states;
  std::map<int, Routing> routing;  // by sparse layer
};

}  // namespace

CommandSpec ForwardSpec() {
  CommandSpec spec;
  spec.name = "forward";
  spec.usage =
      "usage: vlstack forward --model DIR --input IN.safetensors --output OUT.safetensors\n"
      "                       [options]\n"
      "\n"
      "One prefill of the request in IN.safetensors, then its decode_tokens fed one at a time\n"
      "(docs/contracts.md §6); the logits are written to OUT.safetensors. Input tensors:\n"
      "input_ids, inputs_embeds, visual_embeds, position_ids, rope_delta, image_grid_thw,\n"
      "deepstack_positions/features/layers, decode_tokens.\n"
      "\n"
      "  --model DIR          model folder: config.json and the safetensors weights (required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --input FILE         the request's tensors (required)\n"
      "  --output FILE        where the output tensors go (required)\n"
      "  --diagnostics        also write hidden_after_layer.{i}, final_hidden, k_cache.{i} and\n"
      "                       v_cache.{i}, and for each sparse (mixture-of-experts) layer\n"
      "                       router_experts.{i} and router_weights.{i} (default off)\n"
      "  --all-logits         the logits of every prompt row, [S, V] (default: the last row,\n"
      "                       [1, V])\n"
      "  --capacity C         context capacity in tokens (default: the prompt plus the decode\n"
      "                       tokens, at least the config's DeepStack Nmax)\n"
      "  --image FILE         an image (JPEG, PNG, WebP; repeat for several, in prompt order).\n"
      "                       input_ids then holds the prompt with one image pad token per\n"
      "                       image between vision_start and vision_end: the images are\n"
      "                       encoded by the vision tower, each pad expanded to its image's\n"
      "                       tokens, positions derived (get_rope_index) and the prefill runs\n"
      "                       through the DeepStack entry. Also writes input_ids (expanded),\n"
      "                       image_grid_thw, position_ids and rope_delta\n" +
      VideoFlagsHelp() +
      "                       input_ids then holds <|vision_start|><|video_pad|><|vision_end|>\n"
      "                       per video; each becomes its temporal groups, each written\n"
      "                       '<t seconds>' (tokenized with the folder's tokenizer.json),\n"
      "                       vision_start, its pads, vision_end. Also writes video_grid_thw\n"
      "  --generate N         greedy-decode up to N tokens after the prefill (stopping after an\n"
      "                       EOS id), written as generated_tokens (not with decode_tokens)\n" +
      LoadFlagsHelp("f32") + "  --help               this text\n";
  spec.value_flags = {"model", "input",    "output", "capacity",   "image",
                      "video", "generate", "fps",    "max-frames", "num-frames"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.bool_flags = {"diagnostics", "all-logits"};
  spec.example =
      "  vlstack forward --model ./model --input in.safetensors --output out.safetensors \\\n"
      "      --generate 16\n";
  return spec;
}

namespace {

Status Forward(const Args& args) {
  VLS_RETURN_IF_ERROR(args.Require("model").status());
  VLS_ASSIGN_OR_RETURN(std::string in_path, args.Require("input"));
  VLS_ASSIGN_OR_RETURN(std::string out_path, args.Require("output"));
  VLS_ASSIGN_OR_RETURN(std::string model_dir, ModelDirFlag(args));
  LoadOptions lo;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "f32", &lo));
  const bool diagnostics = args.Has("diagnostics");
  const bool all_logits = args.Has("all-logits");
  VLS_ASSIGN_OR_RETURN(const VisualFiles visual, VisualFilesFromArgs(args));
  VLS_ASSIGN_OR_RETURN(long long generate, args.Int("generate", 0, 0, 1 << 24));

  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> in, SafetensorsFile::Open(in_path));
  VLS_ASSIGN_OR_RETURN(InputLengths lengths, PeekInput(*in));
  if (generate > 0 && lengths.decode > 0) {
    return InvalidArgument("--generate and the input's decode_tokens exclude each other");
  }
  lengths.decode += generate;
  if (!visual.empty()) VLS_RETURN_IF_ERROR(CheckImageInputTensors(*in).WithContext("--input"));
  // The capacity covers the prompt and the decode tokens (and a config-declared Nmax). Without
  // --capacity the input may ask for at most the model's max_position_embeddings.
  VLS_ASSIGN_OR_RETURN(Qwen3Config file_cfg, LoadQwen3Config(model_dir));
  if (!visual.empty()) {
    VLS_ASSIGN_OR_RETURN(lengths.prompt, PlanExpandedLength(model_dir, lengths.prompt, visual));
  }
  const bool given = args.Has("capacity");
  VLS_RETURN_IF_ERROR(
      CheckRequestTokens(lengths.prompt, lengths.decode, "decode tokens",
                         given ? 1 << 24 : MaxRequestTokens(file_cfg),
                         given ? "the largest --capacity" : "the model's max_position_embeddings")
          .WithContext("--input"));
  int64_t min_capacity = lengths.prompt + lengths.decode;
  if (file_cfg.deepstack) {
    min_capacity = std::max<int64_t>(min_capacity, file_cfg.deepstack->max_visual_positions);
  }
  VLS_ASSIGN_OR_RETURN(long long capacity, args.Int("capacity", min_capacity, 1, 1 << 24));
  if (capacity < lengths.prompt + lengths.decode) {
    return OutOfRange("--capacity " + std::to_string(capacity) +
                      " is smaller than the prompt plus decode tokens (" +
                      std::to_string(lengths.prompt + lengths.decode) + ")");
  }
  lo.capacity = static_cast<int>(capacity);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadedModel::Load(model_dir, lo));
  const Qwen3Model* model = &loaded->model();
  const Qwen3Config& cfg = model->config();
  const int64_t H = cfg.hidden;
  RequestInput req;
  VisualFeatures features;
  if (visual.empty()) {
    VLS_ASSIGN_OR_RETURN(req, ReadRequestInput(*in, *model, capacity));
  } else {
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<ImageEncoder> encoder,
                         ImageEncoder::Load(model_dir, *loaded, ImageEncoderOptions{}));
    std::unique_ptr<tok::Tokenizer> tokenizer;
    if (!visual.videos.empty()) {
      VLS_ASSIGN_OR_RETURN(tokenizer, LoadTimestampTokenizer(model_dir));
    }
    VLS_ASSIGN_OR_RETURN(
        req, ReadVisualRequestInput(*in, *loaded, *encoder, visual, tokenizer.get(), &features));
  }
  const int64_t S = req.length;
  const int32_t delta = req.rope_delta;
  const std::vector<int32_t>& decode = req.decode_tokens;
  const auto N = static_cast<int64_t>(decode.size());

  Session session(*loaded);
  CaptureHook capture;
  capture.hidden = H;
  capture.rows = req.length;
  capture.capture_states = !req.deepstack;
  PrefillOptions opts;
  opts.all_logits = all_logits;
  std::vector<float> logits;
  // One prompt, one validator (ValidatePrompt) and the entry its contents select.
  PromptView prompt;
  prompt.positions = &req.positions;
  prompt.rope_delta = delta;
  if (req.has_ids) prompt.tokens = req.ids;
  if (!req.token_only) prompt.embeddings = req.embeddings;
  if (req.deepstack) prompt.deepstack = &*req.deepstack;
  opts.hidden_states = req.deepstack && diagnostics ? &capture.states : nullptr;
  // The observer also records the routing, with or without DeepStack.
  opts.observer = diagnostics ? &capture : nullptr;
  VLS_RETURN_IF_ERROR(RenameDeepStackTensors(session.Prefill(prompt, opts, &logits)));
  std::vector<float> decode_logits;
  std::vector<float> step;
  for (int32_t t : decode) {
    VLS_RETURN_IF_ERROR(session.Decode(t, &step));
    decode_logits.insert(decode_logits.end(), step.begin(), step.end());
  }
  // --generate: greedy from the last prompt row, stopping after an EOS id.
  std::vector<int32_t> generated;
  if (generate > 0) {
    const int64_t V = cfg.vocab;
    step.assign(logits.end() - V, logits.end());
    while (true) {
      const auto best =
          static_cast<int32_t>(std::max_element(step.begin(), step.end()) - step.begin());
      generated.push_back(best);
      const bool eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), best) !=
                       cfg.eos_token_ids.end();
      if (eos || static_cast<long long>(generated.size()) == generate) break;
      VLS_RETURN_IF_ERROR(session.Decode(best, &step));
    }
  }

  // Outputs.
  const int64_t V = cfg.vocab;
  std::vector<HostTensor> keep;
  std::vector<NamedTensor> out;
  auto add = [&](const std::string& name, HostTensor t) {
    keep.push_back(std::move(t));
    out.push_back({name, keep.back().view()});
  };
  keep.reserve(8 + 6 * static_cast<size_t>(cfg.layers));
  add("logits", HostTensor::FromF32({all_logits ? S : 1, V}, logits));
  if (generate > 0) {
    add("generated_tokens",
        HostTensor::FromI32({static_cast<int64_t>(generated.size())}, generated));
  }
  if (!visual.empty()) {
    add("input_ids", HostTensor::FromI32({S}, req.ids));
    const auto add_grids = [&](const char* name, const std::vector<GridThw>& grids) {
      std::vector<int32_t> g;
      for (const GridThw& t : grids) g.insert(g.end(), {t.t, t.h, t.w});
      add(name, HostTensor::FromI32({static_cast<int64_t>(grids.size()), 3}, g));
    };
    if (!visual.images.empty()) add_grids("image_grid_thw", features.ImageGrids());
    if (!visual.videos.empty()) add_grids("video_grid_thw", features.VideoGrids());
    add("position_ids", HostTensor::FromI32({3, S}, req.positions.data));
    add("rope_delta", HostTensor::FromI32({1}, std::vector<int32_t>{delta}));
  }
  if (!decode.empty() || (lengths.decode > 0 && generate == 0)) {
    add("decode_logits", HostTensor::FromF32({N, V}, decode_logits));
    add("decode_tokens", HostTensor::FromI32({N}, decode));
  }
  if (diagnostics) {
    for (int l = 0; l < cfg.layers; ++l) {
      add("hidden_after_layer." + std::to_string(l),
          HostTensor::FromF32({S, H}, capture.states[static_cast<size_t>(l)]));
    }
    std::vector<float> fin(static_cast<size_t>(S * H));
    model->FinalNorm(capture.states.back().data(), S, fin.data());
    add("final_hidden", HostTensor::FromF32({S, H}, fin));
    const int64_t T = S + N, row = session.cache().row_floats();
    std::vector<float> k(static_cast<size_t>(T * row)), v(k.size());  // [T, nkv, D]
    for (int l = 0; l < cfg.layers; ++l) {
      session.cache().ReadRows(l, 0, static_cast<int>(T), k.data(), v.data());
      add("k_cache." + std::to_string(l), HostTensor::FromF32({T, cfg.kv_heads, cfg.head_dim}, k));
      add("v_cache." + std::to_string(l), HostTensor::FromF32({T, cfg.kv_heads, cfg.head_dim}, v));
    }
    for (const auto& [l, r] : capture.routing) {
      const int64_t top_k = cfg.moe->top_k;
      add("router_experts." + std::to_string(l), HostTensor::FromI32({S, top_k}, r.experts));
      add("router_weights." + std::to_string(l), HostTensor::FromF32({S, top_k}, r.weights));
    }
  }
  VLS_RETURN_IF_ERROR(WriteSafetensors(out_path, out));
  std::fprintf(stderr, "[forward] %s: S=%lld decode=%lld positions=%s rope_delta=%d -> %s\n",
               model_dir.c_str(), static_cast<long long>(S), static_cast<long long>(N),
               PositionModeName(cfg.position_mode), delta, out_path.c_str());
  return Status::Ok();
}

}  // namespace

int RunForward(int argc, char** argv) { return RunCommand(ForwardSpec(), argc, argv, Forward); }

}  // namespace vls::cli
