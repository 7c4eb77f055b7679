#include "cli/request_input.h"

#include <algorithm>
#include <cstring>
#include <set>

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

std::vector<GridThw> Grids(const SafetensorsFile& f, const SafetensorsEntry* e) {
  std::vector<GridThw> g;
  if (e == nullptr) return g;
  const TensorView v = f.View(*e);
  for (int64_t i = 0; i < e->shape[0]; ++i)
    g.push_back({v.i32()[3 * i], v.i32()[3 * i + 1], v.i32()[3 * i + 2]});
  return g;
}

}  // namespace

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

StatusOr<InputLengths> PeekInput(const SafetensorsFile& in) {
  for (const SafetensorsEntry& e : in.entries()) {
    if (!kInputNames.count(e.name)) return InvalidArgument("unknown input tensor '" + e.name + "'");
  }
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* ids_e, Input(in, "input_ids", DType::kI32, 1));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* emb_e, Input(in, "inputs_embeds", DType::kF32, 2));
  VLS_ASSIGN_OR_RETURN(const SafetensorsEntry* dec_e, Input(in, "decode_tokens", DType::kI32, 1));
  if (ids_e == nullptr && emb_e == nullptr) {
    return InvalidArgument("the input needs 'input_ids' or 'inputs_embeds'");
  }
  InputLengths l;
  l.prompt = emb_e ? emb_e->shape[0] : ids_e->shape[0];
  l.decode = dec_e ? dec_e->shape[0] : 0;
  return l;
}

StatusOr<RequestInput> ReadRequestInput(const SafetensorsFile& file, const Qwen3Model& model) {
  const SafetensorsFile* in = &file;
  VLS_RETURN_IF_ERROR(PeekInput(file).status());
  const Qwen3Config& cfg = model.config();
  const int64_t H = cfg.hidden;
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
  RequestInput r;
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
    model.Embed(ids, emb.data());
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
    if ((img_e && img_e->shape[1] != 3) || (vid_e && vid_e->shape[1] != 3)) {
      return InvalidArgument("image_grid_thw / video_grid_thw must have shape [n,3]");
    }
    std::vector<GridThw> img = Grids(*in, img_e), vid = Grids(*in, vid_e);
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
  r.decode_tokens.assign(decode.begin(), decode.end());
  if (deepstack) {
    const TensorView pos = in->View(*dsp_e), feat = in->View(*dsf_e);
    // deepstack_layers defaults to 0..K-1 (K from the features' first dimension).
    HostTensor default_layers;
    TensorView layers;
    if (dsl_e) {
      layers = in->View(*dsl_e);
    } else {
      const int64_t K = feat.shape.empty() ? 0 : feat.shape[0];
      default_layers = HostTensor(DType::kI32, {K});
      for (int64_t k = 0; k < K; ++k) default_layers.i32()[k] = static_cast<int32_t>(k);
      layers = default_layers.view();
    }
    auto payload = DeepStackPayload::Create(pos, feat, layers);
    if (!payload.ok()) return RenameDeepStackTensors(payload.status());
    r.deepstack = std::move(*payload);
  }
  r.length = S;
  r.has_ids = ids_e != nullptr;
  if (r.has_ids) r.ids.assign(ids.begin(), ids.end());
  r.token_only = r.has_ids && !emb_e && !vis_e && !deepstack;
  r.embeddings = std::move(emb);
  r.positions = std::move(positions);
  r.rope_delta = delta;
  return r;
}

}  // namespace vls::cli
