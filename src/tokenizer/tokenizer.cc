#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "base/file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace vls::tok {
namespace {

// Both the decoder and the post-processor must be ByteLevel (or absent): anything else changes
// the text or the ids and is refused by name.
Status CheckByteLevelOnly(const nlohmann::json& j, const char* what) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument(std::string(what) + " must be an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    const char* key = std::string_view(what) == "decoder" ? "decoders" : "processors";
    if (!j.contains(key) || !j[key].is_array()) {
      return InvalidArgument(std::string(what) + " Sequence: \"" + key + "\" must be an array");
    }
    for (const auto& e : j[key]) VLS_RETURN_IF_ERROR(CheckByteLevelOnly(e, what));
    return Status::Ok();
  }
  return Unimplemented(std::string(what) + " type \"" + type + "\" is not supported");
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss("tokenizer.json is not valid JSON");
  if (!j.is_object()) return DataLoss("tokenizer.json must hold a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    if (j.contains(key) && !j[key].is_null()) {
      return Unimplemented(std::string("tokenizer.json \"") + key + "\" is not supported");
    }
  }
  if (!j.contains("model")) return InvalidArgument("tokenizer.json has no \"model\"");
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null()) {
    return Unimplemented("tokenizer.json without a pre_tokenizer is not supported");
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  VLS_ASSIGN_OR_RETURN(t->added_,
                       AddedVocabulary::FromJson(j.value("added_tokens", nlohmann::json())));
  auto norm = Normalizer::FromJson(j.value("normalizer", nlohmann::json()));
  if (!norm.ok()) return norm.status().WithContext("tokenizer.json normalizer");
  t->normalizer_ = std::move(*norm);
  auto pre = PreTokenizer::FromJson(j["pre_tokenizer"]);
  if (!pre.ok()) return pre.status().WithContext("tokenizer.json");
  t->pre_tokenizer_ = std::move(*pre);
  VLS_RETURN_IF_ERROR(CheckByteLevelOnly(j.value("decoder", nlohmann::json()), "decoder"));
  VLS_RETURN_IF_ERROR(
      CheckByteLevelOnly(j.value("post_processor", nlohmann::json()), "post_processor"));
  auto bpe = BpeModel::FromJson(j["model"]);
  if (!bpe.ok()) return bpe.status().WithContext("tokenizer.json model");
  t->bpe_ = std::move(*bpe);
  t->id_bytes_.resize(t->bpe_->id_limit());
  for (int32_t id = 0; id < t->bpe_->id_limit(); ++id) {
    const std::string* tok = t->bpe_->IdToToken(id);
    if (tok == nullptr) continue;
    // ByteLevel decoding: a token outside the byte alphabet contributes its own UTF-8.
    auto bytes = ByteLevelToBytes(*tok);
    if (bytes) {
      t->id_bytes_[id] = std::move(*bytes);
    } else {
      t->id_bytes_[id] = *tok;
    }
  }
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    file = JoinPath(path, "tokenizer.json");
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  auto t = FromJson(text);
  if (!t.ok()) return t.status().WithContext(file);
  return t;
}

Status Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>* ids) const {
  std::vector<std::string_view> pieces;
  VLS_ASSIGN_OR_RETURN(std::string normalized, normalizer_.Apply(text));
  std::vector<Segment> segments;
  if (added_.has_normalized_tokens()) {
    added_.Split(normalized, /*normalized=*/true, &segments);
  } else {
    segments.push_back({normalized, -1});
  }
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids->push_back(seg.id);
      continue;
    }
    VLS_RETURN_IF_ERROR(pre_tokenizer_.Split(seg.text, &pieces));
    for (std::string_view piece : pieces) bpe_->EncodeWord(piece, ids);
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  std::string sanitized;
  if (!IsValidUtf8(text)) {
    sanitized = SanitizeUtf8(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  added_.Split(text, /*normalized=*/false, &segments);
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      VLS_RETURN_IF_ERROR(EncodeText(seg.text, &ids));
    }
  }
  return ids;
}

bool Tokenizer::TokenBytes(int32_t id, bool skip_special_tokens, std::string* bytes,
                           bool* added) const {
  if (const AddedToken* t = added_.Find(id)) {
    if (skip_special_tokens && t->special) return false;
    *bytes = t->content;
    *added = true;
    return true;
  }
  if (bpe_->IdToToken(id) == nullptr) return false;
  *bytes = id_bytes_[id];
  *added = false;
  return true;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  std::string pending;
  std::string bytes;
  bool added = false;
  for (int32_t id : ids) {
    if (!TokenBytes(id, skip_special_tokens, &bytes, &added)) continue;
    if (added) {
      out += SanitizeUtf8(pending);
      pending.clear();
      out += bytes;
    } else {
      pending += bytes;
    }
  }
  out += SanitizeUtf8(pending);
  return out;
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  const int32_t id = added_.IdOf(token);
  return id >= 0 ? id : bpe_->TokenToId(token);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* t = added_.Find(id);
  return t != nullptr && t->special;
}

int32_t Tokenizer::id_limit() const {
  int32_t limit = bpe_->id_limit();
  for (const AddedToken& t : added_.tokens()) limit = std::max(limit, t.id + 1);
  return limit;
}

std::string StreamDecoder::Feed(int32_t id) {
  std::string bytes;
  bool added = false;
  if (!tokenizer_->TokenBytes(id, skip_special_, &bytes, &added)) return {};
  if (added) {
    std::string out = SanitizeUtf8(pending_);
    pending_.clear();
    return out + bytes;
  }
  pending_ += bytes;
  const size_t hold = IncompleteTailLength(pending_);
  std::string out = SanitizeUtf8(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace vls::tok
