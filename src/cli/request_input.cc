#include "cli/request_input.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "io/untrusted_json.h"
#include "runtime/chat_json.h"
#include "runtime/image_encoder.h"
#include "runtime/session.h"
#include "runtime/stop_matcher.h"
#include "runtime/structured_output_json.h"

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

// The rows of an image_grid_thw / video_grid_thw tensor, after its shape: [n,3] with at most
// `max_rows` rows (each grid takes at least one of the prompt's tokens).
StatusOr<std::vector<GridThw>> Grids(const SafetensorsFile& f, const SafetensorsEntry* e,
                                     int64_t max_rows) {
  std::vector<GridThw> g;
  if (e == nullptr) return g;
  if (e->shape[1] != 3) {
    return InvalidArgument("input tensor '" + e->name + "' must have shape [n,3], got " +
                           ShapeToString(e->shape));
  }
  if (e->shape[0] > max_rows) {
    return InvalidArgument("input tensor '" + e->name + "' has " + std::to_string(e->shape[0]) +
                           " grids but the prompt has only " + std::to_string(max_rows) +
                           " tokens");
  }
  const TensorView v = f.View(*e);
  const int32_t* d = v.i32();
  g.reserve(static_cast<size_t>(e->shape[0]));
  for (int64_t i = 0; i < e->shape[0]; ++i) g.push_back({d[3 * i], d[3 * i + 1], d[3 * i + 2]});
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

StatusOr<RequestInput> ReadRequestInput(const SafetensorsFile& file, const Qwen3Model& model,
                                        int64_t max_tokens) {
  const SafetensorsFile* in = &file;
  VLS_ASSIGN_OR_RETURN(InputLengths lengths, PeekInput(file));
  // Nothing is sized from the input before its length is known to fit.
  VLS_RETURN_IF_ERROR(CheckRequestTokens(lengths.prompt, lengths.decode, "decode tokens",
                                         max_tokens, "the context capacity"));
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
    // As in the reference, get_rope_index takes the vision path only when grids are given. The
    // grids are checked against the prompt before it expands them (a video of t groups becomes
    // t items): together they may describe at most S visual tokens.
    VLS_ASSIGN_OR_RETURN(std::vector<GridThw> img, Grids(*in, img_e, S));
    VLS_ASSIGN_OR_RETURN(std::vector<GridThw> vid, Grids(*in, vid_e, S));
    const int merge = cfg.spatial_merge_size;
    VLS_ASSIGN_OR_RETURN(int64_t img_tokens, ValidateGridList(img, merge, "image_grid_thw", S));
    VLS_RETURN_IF_ERROR(ValidateGridList(vid, merge, "video_grid_thw", S - img_tokens).status());
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
      if (K > cfg.layers) {
        return InvalidArgument("deepstack_features: K = " + std::to_string(K) +
                               " levels but the model has " + std::to_string(cfg.layers) +
                               " layers (deepstack_layers defaults to 0..K-1)");
      }
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

int64_t MaxRequestTokens(const Qwen3Config& cfg) {
  return cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : kMaxContextPositions;
}

Status CheckRequestTokens(int64_t prompt, int64_t new_tokens, std::string_view new_name,
                          int64_t max_tokens, std::string_view limit) {
  if (prompt < 1) return InvalidArgument("the input's prompt is empty (S = 0)");
  if (new_tokens > max_tokens || prompt > max_tokens - new_tokens) {
    return OutOfRange("prompt " + std::to_string(prompt) + " + " + std::string(new_name) + " " +
                      std::to_string(new_tokens) + " exceeds " + std::string(limit) + " " +
                      std::to_string(max_tokens));
  }
  return Status::Ok();
}

namespace {

using Json = nlohmann::json;

constexpr std::string_view kBatchFields[] = {"id",
                                             "input",
                                             "max_new_tokens",
                                             "ignore_eos",
                                             "cancel_after_tokens",
                                             "temperature",
                                             "top_k",
                                             "top_p",
                                             "min_p",
                                             "repetition_penalty",
                                             "presence_penalty",
                                             "frequency_penalty",
                                             "seed",
                                             "stop",
                                             "images",
                                             "videos",
                                             "fps",
                                             "max_frames",
                                             "num_frames",
                                             "speculative",
                                             "json_schema",
                                             "grammar",
                                             "regex"};

// A float sampling field: any finite JSON number a float holds.
Status ReadFloatField(const Json& v, const char* what, float* out) {
  double d = 0;
  VLS_RETURN_IF_ERROR(ReadJsonNumber(v, what, -std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::max(), &d));
  *out = static_cast<float>(d);
  return Status::Ok();
}

// A list of files ("images", "videos"): at most kMaxBatchLineImages non-empty names without NUL.
Status ReadFileList(const Json* v, const std::string& key, const std::string& kind,
                    std::vector<std::string>* out) {
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) {
    return InvalidArgument("field '" + key + "' must be a list of " + kind + " files, not " +
                           JsonTypeName(*v));
  }
  if (v->size() > kMaxBatchLineImages) {
    return InvalidArgument("field '" + key + "' lists " + std::to_string(v->size()) + " " + key +
                           ", more than the " + std::to_string(kMaxBatchLineImages) +
                           " a request may have");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string what = "field '" + key + "'[" + std::to_string(i) + "]";
    std::string& f = out->emplace_back();
    VLS_RETURN_IF_ERROR(ReadJsonString((*v)[i], what, &f));
    if (f.empty() || f.find('\0') != std::string::npos) {
      return InvalidArgument(what + " must name a file");
    }
  }
  return Status::Ok();
}

// "fps", "max_frames", "num_frames": the sampling of the line's videos, within the encoder's
// default bounds (ImageEncoderOptions), as `forward --fps / --max-frames / --num-frames`.
template <typename Field>
Status ReadVideoSampling(const Field& field, BatchLine* line) {
  const ImageEncoderOptions bounds;
  VideoSamplingOptions& o = line->video;
  bool any = false;
  if (const Json* v = field("fps")) {
    double fps = 0;
    VLS_RETURN_IF_ERROR(ReadJsonNumber(*v, "fps", 0.0, bounds.max_video_fps, &fps));
    if (!(fps > 0)) return InvalidArgument("field 'fps' must be more than 0");
    o.fps = fps;
    any = true;
  }
  for (const char* key : {"max_frames", "num_frames"}) {
    const Json* v = field(key);
    if (v == nullptr) continue;
    int64_t n = 0;
    VLS_RETURN_IF_ERROR(ReadJsonInt(*v, key, 1, bounds.max_video_frames, &n));
    (std::string_view(key) == "max_frames" ? o.max_frames : o.num_frames) = static_cast<int>(n);
    any = true;
  }
  if (o.fps && o.num_frames) {
    return InvalidArgument("fields 'fps' and 'num_frames' cannot both be given");
  }
  if (any && line->videos.empty()) {
    return InvalidArgument("fields 'fps', 'max_frames' and 'num_frames' need 'videos'");
  }
  return Status::Ok();
}

Status ReadBatchFields(const Json& j, BatchLine* line) {
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (std::find(std::begin(kBatchFields), std::end(kBatchFields), std::string_view(key)) !=
        std::end(kBatchFields)) {
      continue;
    }
    return InvalidArgument("unknown field " + JsonSnippet(Json(key)) +
                           " (fields: id, input, "
                           "max_new_tokens, ignore_eos, cancel_after_tokens, temperature, top_k, "
                           "top_p, min_p, repetition_penalty, presence_penalty, "
                           "frequency_penalty, seed, stop, images, videos, fps, max_frames, "
                           "num_frames, speculative, json_schema, grammar, regex)");
  }
  // Each present, non-null field.
  auto field = [&j](const char* key) -> const Json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  const Json* v = field("input");
  if (v == nullptr) return InvalidArgument("field 'input' is required");
  VLS_RETURN_IF_ERROR(ReadJsonString(*v, "input", &line->input));
  if (line->input.empty()) return InvalidArgument("field 'input' must name a file");
  if (line->input.find('\0') != std::string::npos) {
    return InvalidArgument("field 'input' holds a NUL character");
  }
  VLS_RETURN_IF_ERROR(ReadFileList(field("images"), "images", "image", &line->images));
  VLS_RETURN_IF_ERROR(ReadFileList(field("videos"), "videos", "video", &line->videos));
  VLS_RETURN_IF_ERROR(ReadVideoSampling(field, line));
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  int64_t n = 0;
  if ((v = field("max_new_tokens"))) {
    VLS_RETURN_IF_ERROR(ReadJsonInt(*v, "max_new_tokens", 1, kIntMax, &n));
    line->max_new_tokens = static_cast<int>(n);
  }
  if ((v = field("ignore_eos")))
    VLS_RETURN_IF_ERROR(ReadJsonBool(*v, "ignore_eos", &line->ignore_eos));
  if ((v = field("cancel_after_tokens"))) {
    VLS_RETURN_IF_ERROR(ReadJsonInt(*v, "cancel_after_tokens", 0, kIntMax, &n));
    line->cancel_after = n;
  }
  SamplingParams& s = line->sampling;
  const std::pair<const char*, float*> floats[] = {{"temperature", &s.temperature},
                                                   {"top_p", &s.top_p},
                                                   {"min_p", &s.min_p},
                                                   {"repetition_penalty", &s.repetition_penalty},
                                                   {"presence_penalty", &s.presence_penalty},
                                                   {"frequency_penalty", &s.frequency_penalty}};
  for (const auto& [key, out] : floats) {
    if ((v = field(key))) VLS_RETURN_IF_ERROR(ReadFloatField(*v, key, out));
  }
  if ((v = field("top_k"))) {
    VLS_RETURN_IF_ERROR(ReadJsonInt(*v, "top_k", 0, kIntMax, &n));
    s.top_k = static_cast<int>(n);
  }
  if ((v = field("seed"))) {
    // The whole uint64 range: ReadJsonInt stops at 2^63 - 1.
    if (v->is_number_unsigned()) {
      s.seed = v->get<uint64_t>();
    } else {
      VLS_RETURN_IF_ERROR(ReadJsonInt(*v, "seed", 0, std::numeric_limits<int64_t>::max(), &n));
      s.seed = static_cast<uint64_t>(n);
    }
  }
  VLS_RETURN_IF_ERROR(ValidateSamplingParams(s));
  if ((v = field("stop"))) {
    std::vector<std::string> stop;
    if (v->is_array()) {
      stop.reserve(v->size());
      for (size_t i = 0; i < v->size(); ++i) {
        VLS_RETURN_IF_ERROR(ReadJsonString((*v)[i], "field 'stop'[" + std::to_string(i) + "]",
                                           &stop.emplace_back()));
      }
    } else if (v->is_string()) {
      stop.push_back(v->get<std::string>());
    } else {
      return InvalidArgument("field 'stop' must be a string or a list of strings, not " +
                             JsonTypeName(*v));
    }
    VLS_RETURN_IF_ERROR(ValidateStopStrings(stop).WithContext("field 'stop'"));
    line->stop = std::move(stop);
  }
  if ((v = field("speculative"))) {
    SpeculativeParams p;
    VLS_RETURN_IF_ERROR(SpeculativeFromJson(nlohmann::ordered_json::parse(v->dump()), &p));
    line->speculative = p;
  }
  return Status::Ok();
}

}  // namespace

Status ParseBatchLine(std::string_view label, std::string_view text, BatchLine* line) {
  *line = BatchLine();
  if (text.size() > kMaxBatchLineBytes) {
    return InvalidArgument(std::string(label) + ": " + std::to_string(text.size()) +
                           " bytes, more than the " + std::to_string(kMaxBatchLineBytes) +
                           " a request line may have");
  }
  Json j;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, text, &j, {.code = StatusCode::kInvalidArgument}));
  if (!j.is_object()) {
    return InvalidArgument(std::string(label) + ": must be a JSON object, not " + JsonTypeName(j));
  }
  if (auto it = j.find("id"); it != j.end()) line->id = std::move(*it);
  VLS_RETURN_IF_ERROR(ReadBatchFields(j, line));
  // Structured output: read again in key order (a schema's properties come out in its order).
  if (j.contains("json_schema") || j.contains("grammar") || j.contains("regex")) {
    nlohmann::ordered_json ordered;
    VLS_RETURN_IF_ERROR(
        ParseUntrustedOrderedJson(label, text, &ordered, {.code = StatusCode::kInvalidArgument}));
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
    for (const char* key : {"json_schema", "grammar", "regex"}) {
      if (auto it = ordered.find(key); it != ordered.end()) fields[key] = std::move(*it);
    }
    VLS_RETURN_IF_ERROR(StructuredOutputFromJson(fields, &line->structured));
  }
  return Status::Ok();
}

StatusOr<GenerationRequest> BatchRequestFromInput(const SafetensorsFile& in, const BatchLine& line,
                                                  const Qwen3Model& model, int64_t max_tokens) {
  VLS_ASSIGN_OR_RETURN(RequestInput r, ReadRequestInput(in, model, max_tokens));
  return BatchRequest(std::move(r), line, max_tokens);
}

StatusOr<GenerationRequest> BatchRequest(RequestInput r, const BatchLine& line,
                                         int64_t max_tokens) {
  if (!r.decode_tokens.empty()) return InvalidArgument("decode_tokens is not used by batch");
  VLS_RETURN_IF_ERROR(CheckRequestTokens(r.length, line.max_new_tokens, "max_new_tokens",
                                         max_tokens, "the context capacity"));
  GenerationRequest g;
  if (r.has_ids) g.tokens = std::move(r.ids);
  if (!r.token_only) g.embeddings = std::move(r.embeddings);
  g.positions = std::move(r.positions);
  g.rope_delta = r.rope_delta;
  g.deepstack = std::move(r.deepstack);
  g.max_new_tokens = line.max_new_tokens;
  g.ignore_eos = line.ignore_eos;
  g.sampling = line.sampling;
  g.speculative = line.speculative;
  return g;
}

}  // namespace vls::cli
