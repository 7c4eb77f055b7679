// `vlstack forward` (CONTRACTS §6): one prefill plus optional decode, tensors in and out.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "cli/args.h"
#include "cli/commands.h"
#include "io/safetensors.h"
#include "runtime/deepstack.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/session.h"

namespace vls::cli {
namespace {

const std::set<std::string> kInputNames = {
    "input_ids",          "inputs_embeds",    "visual_embeds",  "position_ids",
    "rope_delta",         "image_grid_thw",   "video_grid_thw", "deepstack_positions",
    "deepstack_features", "deepstack_layers", "decode_tokens"};

// Fetches an optional input tensor and checks its dtype and rank.
StatusOr<const SafetensorsEntry*> Input(const SafetensorsFile& f, const std::string& name,
                                        DType dtype, size_t rank) {
  const SafetensorsEntry* e = f.Find(name);
  if (e == nullptr) return e;
  if (e->dtype != dtype) {
    return InvalidArgument("input tensor '" + name + "' must be " + std::string(DTypeName(dtype)) +
                           ", got " + std::string(DTypeName(e->dtype)));
  }
  if (e->shape.size() != rank) {
    return InvalidArgument("input tensor '" + name + "' must have rank " + std::to_string(rank) +
                           ", got shape " + ShapeToString(e->shape));
  }
  return e;
}

// Records the residual after every layer (post-hook) for --diagnostics.
class CaptureHook : public LayerHook {
 public:
  void AfterLayer(int layer, float* x, int64_t M) override {
    (void)layer;
    states.emplace_back(x, x + M * hidden);
  }
  int64_t hidden = 0;
  std::vector<std::vector<float>> states;
};

std::vector<GridThw> Grids(const SafetensorsFile& f, const SafetensorsEntry* e) {
  std::vector<GridThw> g;
  if (e == nullptr) return g;
  const TensorView v = f.View(*e);
  for (int64_t i = 0; i < e->shape[0]; ++i)
    g.push_back({v.i32()[3 * i], v.i32()[3 * i + 1], v.i32()[3 * i + 2]});
  return g;
}

// CLI tensor names for the payload's tensors, so errors name what the user wrote.
Status RenameDeepStackTensors(Status s) {
  if (s.ok()) return s;
  std::string m = s.message();
  const std::pair<const char*, const char*> names[] = {{"visual_positions", "deepstack_positions"},
                                                       {"layer_features", "deepstack_features"},
                                                       {"layer_indices", "deepstack_layers"}};
  for (const auto& [from, to] : names) {
    for (size_t at = m.find(from); at != std::string::npos;
         at = m.find(from, at + std::strlen(to))) {
      m.replace(at, std::strlen(from), to);
    }
  }
  return Status(s.code(), m);
}

Status RunDeepStackPrefill(const SafetensorsFile& in, const SafetensorsEntry* dsp_e,
                           const SafetensorsEntry* dsf_e, const SafetensorsEntry* dsl_e,
                           std::optional<std::span<const int32_t>> ids,
                           const std::vector<float>& emb, const PositionIds& positions,
                           int32_t delta, bool diagnostics, bool all_logits, Session& session,
                           std::vector<std::vector<float>>* states, std::vector<float>* logits) {
  const TensorView pos = in.View(*dsp_e), feat = in.View(*dsf_e);
  // deepstack_layers defaults to 0..K-1 (K from the features' first dimension).
  HostTensor default_layers;
  TensorView layers;
  if (dsl_e) {
    layers = in.View(*dsl_e);
  } else {
    const int64_t K = feat.shape.empty() ? 0 : feat.shape[0];
    default_layers = HostTensor(DType::kI32, {K});
    for (int64_t k = 0; k < K; ++k) default_layers.i32()[k] = static_cast<int32_t>(k);
    layers = default_layers.view();
  }
  auto payload = DeepStackPayload::Create(pos, feat, layers);
  if (!payload.ok()) return RenameDeepStackTensors(payload.status());
  const Qwen3Config& cfg = session.model().config();
  DeepStackRequestFacts facts;
  facts.token_ids = ids;
  facts.image_token_id = cfg.image_token_id;
  facts.video_token_id = cfg.video_token_id;
  PrefillOptions opts;
  opts.hidden_states = diagnostics ? states : nullptr;
  opts.all_logits = all_logits;
  return RenameDeepStackTensors(
      session.PrefillDeepStack(emb, positions, delta, *payload, facts, opts, logits));
}

Status Forward(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string model_dir, args.Require("model"));
  VLS_ASSIGN_OR_RETURN(std::string in_path, args.Require("input"));
  VLS_ASSIGN_OR_RETURN(std::string out_path, args.Require("output"));
  const bool diagnostics = args.Has("diagnostics");
  const bool all_logits = args.Has("all-logits");

  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> in, SafetensorsFile::Open(in_path));
  for (const SafetensorsEntry& e : in->entries()) {
    if (!kInputNames.count(e.name)) return InvalidArgument("unknown input tensor '" + e.name + "'");
  }
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* ids_e, Input(*in, "input_ids", DType::kI32, 1));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* emb_e, Input(*in, "inputs_embeds", DType::kF32, 2));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* vis_e, Input(*in, "visual_embeds", DType::kF32, 2));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* delta_e, Input(*in, "rope_delta", DType::kI32, 1));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* img_e, Input(*in, "image_grid_thw", DType::kI32, 2));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* vid_e, Input(*in, "video_grid_thw", DType::kI32, 2));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* dec_e, Input(*in, "decode_tokens", DType::kI32, 1));
  const SafetensorsEntry* pos_e = in->Find("position_ids");
  const SafetensorsEntry* dsp_e = in->Find("deepstack_positions");
  const SafetensorsEntry* dsf_e = in->Find("deepstack_features");
  const SafetensorsEntry* dsl_e = in->Find("deepstack_layers");
  const bool deepstack = dsp_e || dsf_e || dsl_e;
  if (deepstack && (!dsp_e || !dsf_e)) {
    return InvalidArgument("DeepStack needs both deepstack_positions and deepstack_features");
  }
  if (ids_e == nullptr && emb_e == nullptr) {
    return InvalidArgument("the input needs 'input_ids' or 'inputs_embeds'");
  }

  // The capacity covers the prompt and the decode tokens (and a config-declared Nmax).
  VLS_ASSIGN_OR_RETURN(Qwen3Config file_cfg, LoadQwen3Config(model_dir));
  const int64_t prompt_len = emb_e ? emb_e->shape[0] : ids_e->shape[0];
  const int64_t n_decode = dec_e ? dec_e->shape[0] : 0;
  int64_t min_capacity = prompt_len + n_decode;
  if (file_cfg.deepstack)
    min_capacity = std::max<int64_t>(min_capacity, file_cfg.deepstack->max_visual_positions);
  VLS_ASSIGN_OR_RETURN(long long capacity, args.Int("capacity", min_capacity, 1, 1 << 24));
  if (capacity < prompt_len + n_decode) {
    return OutOfRange("--capacity " + std::to_string(capacity) +
                      " is smaller than the prompt plus decode tokens (" +
                      std::to_string(prompt_len + n_decode) + ")");
  }
  LoadOptions lo;
  lo.capacity = static_cast<int>(capacity);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadedModel::Load(model_dir, lo));
  const Qwen3Model* model = &loaded->model();
  const Qwen3Config& cfg = model->config();
  const int64_t H = cfg.hidden;

  // Embeddings [S, H].
  std::span<const int32_t> ids;
  if (ids_e) ids = {in->View(*ids_e).i32(), static_cast<size_t>(ids_e->shape[0])};
  std::vector<float> emb;
  int64_t S = 0;
  if (emb_e) {
    S = emb_e->shape[0];
    if (emb_e->shape[1] != H) {
      return InvalidArgument("inputs_embeds: shape " + ShapeToString(emb_e->shape) +
                             " but hidden is " + std::to_string(H));
    }
    if (ids_e && ids_e->shape[0] != S) {
      return InvalidArgument("input_ids has " + std::to_string(ids_e->shape[0]) +
                             " tokens but inputs_embeds has " + std::to_string(S) + " rows");
    }
    emb = ToF32Vector(in->View(*emb_e));
  } else {
    S = ids_e->shape[0];
    VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, cfg.vocab, "input_ids"));
    emb.resize(static_cast<size_t>(S * H));
    model->Embed(ids, emb.data());
    if (vis_e) {
      if (vis_e->shape[1] != H) {
        return InvalidArgument("visual_embeds: shape " + ShapeToString(vis_e->shape) +
                               " but hidden is " + std::to_string(H));
      }
      const float* vis = in->View(*vis_e).f32();
      int64_t v = 0;
      for (int64_t s = 0; s < S; ++s) {
        const int32_t t = ids[static_cast<size_t>(s)];
        if (t != cfg.image_token_id && t != cfg.video_token_id) continue;
        if (v < vis_e->shape[0]) std::copy_n(vis + v * H, H, emb.begin() + s * H);
        ++v;
      }
      if (v != vis_e->shape[0]) {
        return InvalidArgument("visual_embeds has " + std::to_string(vis_e->shape[0]) +
                               " rows but input_ids hold " + std::to_string(v) +
                               " image/video pad tokens");
      }
    }
  }
  if (vis_e && emb_e) return InvalidArgument("visual_embeds is used only without inputs_embeds");

  // Positions and delta.
  PositionIds positions;
  int32_t delta = 0;
  if (pos_e) {
    if (pos_e->dtype != DType::kI32) return InvalidArgument("position_ids must be I32");
    const TensorView pv = in->View(*pos_e);
    VLS_ASSIGN_OR_RETURN(positions,
                         PositionsFromTensor(cfg.position_mode, pos_e->shape,
                                             {pv.i32(), static_cast<size_t>(pv.numel())}, S));
  } else if (cfg.position_mode == PositionMode::kMrope && ids_e && (img_e || vid_e)) {
    // As in the reference, get_rope_index takes the vision path only when grids are given.
    std::vector<GridThw> img = Grids(*in, img_e), vid = Grids(*in, vid_e);
    if ((img_e && img_e->shape[1] != 3) || (vid_e && vid_e->shape[1] != 3)) {
      return InvalidArgument("image_grid_thw / video_grid_thw must have shape [n,3]");
    }
    VLS_ASSIGN_OR_RETURN(RopeIndex ri, GetRopeIndex(cfg, ids, img, vid));
    positions = std::move(ri.positions);
    delta = ri.rope_delta;
  } else {
    if (img_e || vid_e) {
      return InvalidArgument(
          cfg.position_mode == PositionMode::k1D
              ? "image_grid_thw/video_grid_thw given but the model uses 1-D positions"
              : "image_grid_thw/video_grid_thw need input_ids to place the images");
    }
    positions = SequentialPositions(cfg.position_mode, S);
  }
  if (delta_e) {
    if (delta_e->shape[0] != 1) return InvalidArgument("rope_delta must have shape [1]");
    delta = in->View(*delta_e).i32()[0];
  }
  std::span<const int32_t> decode;
  if (dec_e) decode = {in->View(*dec_e).i32(), static_cast<size_t>(dec_e->shape[0])};
  VLS_RETURN_IF_ERROR(ValidateTokenIds(decode, cfg.vocab, "decode_tokens"));

  const int64_t N = static_cast<int64_t>(decode.size());
  Session session(*loaded);
  CaptureHook capture;
  capture.hidden = H;
  PrefillOptions opts;
  opts.all_logits = all_logits;
  std::vector<float> logits;
  if (deepstack) {
    VLS_RETURN_IF_ERROR(RunDeepStackPrefill(
        *in, dsp_e, dsf_e, dsl_e, ids_e ? std::optional(ids) : std::nullopt, emb, positions, delta,
        diagnostics, all_logits, session, &capture.states, &logits));
  } else {
    opts.observer = diagnostics ? &capture : nullptr;
    VLS_RETURN_IF_ERROR(session.PrefillEmbeddings(emb, positions, delta, opts, &logits));
  }
  std::vector<float> decode_logits;
  std::vector<float> step;
  for (int32_t t : decode) {
    VLS_RETURN_IF_ERROR(session.Decode(t, &step));
    decode_logits.insert(decode_logits.end(), step.begin(), step.end());
  }

  // Outputs.
  const int64_t V = cfg.vocab;
  std::vector<HostTensor> keep;
  std::vector<NamedTensor> out;
  auto add = [&](const std::string& name, HostTensor t) {
    keep.push_back(std::move(t));
    out.push_back({name, keep.back().view()});
  };
  keep.reserve(8 + 4 * static_cast<size_t>(cfg.layers));
  add("logits", HostTensor::FromF32({all_logits ? S : 1, V}, logits));
  if (dec_e) {
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
    for (int l = 0; l < cfg.layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const float* base = kv == 0 ? session.cache().k(l, 0) : session.cache().v(l, 0);
        add((kv == 0 ? "k_cache." : "v_cache.") + std::to_string(l),
            HostTensor::FromF32({T, cfg.kv_heads, cfg.head_dim},
                                {base, static_cast<size_t>(T * row)}));
      }
    }
  }
  VLS_RETURN_IF_ERROR(WriteSafetensors(out_path, out));
  std::fprintf(stderr, "[forward] %s: S=%lld decode=%lld positions=%s rope_delta=%d -> %s\n",
               model_dir.c_str(), static_cast<long long>(S), static_cast<long long>(N),
               PositionModeName(cfg.position_mode), delta, out_path.c_str());
  return Status::Ok();
}

}  // namespace

int Fail(const char* command, const Status& status) {
  std::fprintf(stderr, "vlstack %s: %s\n", command, status.ToString().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int RunForward(int argc, char** argv) {
  auto args = Args::Parse(argc, argv, {"model", "input", "output", "capacity"},
                          {"diagnostics", "all-logits"});
  if (!args.ok()) return Fail("forward", args.status());
  Status s = Forward(*args);
  if (!s.ok()) return Fail("forward", s);
  return 0;
}

}  // namespace vls::cli
