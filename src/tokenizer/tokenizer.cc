#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "base/file.h"
#include "io/untrusted_json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace vls::tok {
namespace {

// Both the decoder and the post-processor must be ByteLevel (or absent): anything else changes
// the text or the ids and is refused by name.
Status CheckByteLevelOnly(const nlohmann::json* j, const char* what, const char* list_key) {
  if (j == nullptr) return Status::Ok();
  std::vector<const nlohmann::json*> steps;
  VLS_RETURN_IF_ERROR(FlattenSequence(*j, what, list_key, &steps));
  for (const nlohmann::json* step : steps) {
    std::string type;
    VLS_RETURN_IF_ERROR(ComponentType(*step, what, &type));
    if (type != "ByteLevel") {
      return Unimplemented(std::string(what) + " type " + JsonSnippet(nlohmann::json(type)) +
                           " is not supported");
    }
  }
  return Status::Ok();
}

// Reads a tokenizer.json of at most kMaxTokenizerJsonBytes (a FIFO or a device never ends);
// FromJson refuses one over the bound.
StatusOr<std::string> ReadTokenizerFile(const std::string& path) {
  return ReadFileAtMost(path, kMaxTokenizerJsonBytes);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  if (json_text.size() > kMaxTokenizerJsonBytes) {
    return DataLoss("tokenizer.json is larger than " + std::to_string(kMaxTokenizerJsonBytes) +
                    " bytes (kMaxTokenizerJsonBytes)");
  }
  nlohmann::json j;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson("tokenizer.json", json_text, &j));
  if (!j.is_object()) return DataLoss("tokenizer.json must hold a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    if (Field(j, key) != nullptr) {
      return Unimplemented(std::string("tokenizer.json \"") + key + "\" is not supported");
    }
  }
  const nlohmann::json* model = Field(j, "model");
  if (model == nullptr) return InvalidArgument("tokenizer.json has no \"model\"");
  const nlohmann::json* pre_tokenizer = Field(j, "pre_tokenizer");
  if (pre_tokenizer == nullptr) {
    return Unimplemented("tokenizer.json without a pre_tokenizer is not supported");
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const nlohmann::json* added = Field(j, "added_tokens");
  auto added_vocab = AddedVocabulary::FromJson(added ? *added : nlohmann::json());
  if (!added_vocab.ok()) return added_vocab.status().WithContext("tokenizer.json");
  t->added_ = std::move(*added_vocab);
  const nlohmann::json* normalizer = Field(j, "normalizer");
  auto norm = Normalizer::FromJson(normalizer ? *normalizer : nlohmann::json());
  if (!norm.ok()) return norm.status().WithContext("tokenizer.json normalizer");
  t->normalizer_ = std::move(*norm);
  auto pre = PreTokenizer::FromJson(*pre_tokenizer);
  if (!pre.ok()) return pre.status().WithContext("tokenizer.json");
  t->pre_tokenizer_ = std::move(*pre);
  VLS_RETURN_IF_ERROR(
      CheckByteLevelOnly(Field(j, "decoder"), "decoder", "decoders").WithContext("tokenizer.json"));
  VLS_RETURN_IF_ERROR(CheckByteLevelOnly(Field(j, "post_processor"), "post_processor", "processors")
                          .WithContext("tokenizer.json"));
  auto bpe = BpeModel::FromJson(*model);
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
  VLS_ASSIGN_OR_RETURN(std::string text, ReadTokenizerFile(file));
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
