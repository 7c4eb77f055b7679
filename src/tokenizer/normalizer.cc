#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "tokenizer/json_fields.h"

namespace vls::tok {
namespace {

StatusOr<Normalizer::Form> ParseForm(const nlohmann::json& j) {
  std::string type;
  VLS_RETURN_IF_ERROR(ComponentType(j, "normalizer", &type));
  if (type == "NFC") return Normalizer::Form::kNfc;
  if (type == "NFD") return Normalizer::Form::kNfd;
  if (type == "NFKC") return Normalizer::Form::kNfkc;
  if (type == "NFKD") return Normalizer::Form::kNfkd;
  return Unimplemented("normalizer type " + JsonSnippet(nlohmann::json(type)) +
                       " is not supported");
}

const icu::Normalizer2* Instance(Normalizer::Form form, UErrorCode* err) {
  switch (form) {
    case Normalizer::Form::kNfc: return icu::Normalizer2::getNFCInstance(*err);
    case Normalizer::Form::kNfd: return icu::Normalizer2::getNFDInstance(*err);
    case Normalizer::Form::kNfkc: return icu::Normalizer2::getNFKCInstance(*err);
    case Normalizer::Form::kNfkd: return icu::Normalizer2::getNFKDInstance(*err);
  }
  return nullptr;
}

}  // namespace

StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  std::vector<const nlohmann::json*> steps;
  VLS_RETURN_IF_ERROR(FlattenSequence(j, "normalizer", "normalizers", &steps));
  for (const nlohmann::json* e : steps) {
    VLS_ASSIGN_OR_RETURN(Form f, ParseForm(*e));
    n.forms_.push_back(f);
  }
  return n;
}

StatusOr<std::string> Normalizer::Apply(std::string_view text) const {
  std::string cur(text);
  for (Form form : forms_) {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* norm = Instance(form, &err);
    if (U_FAILURE(err) || norm == nullptr) {
      return Internal(std::string("ICU normalizer unavailable: ") + u_errorName(err));
    }
    const icu::StringPiece piece(cur.data(), static_cast<int32_t>(cur.size()));
    // Most text is already normalised; the quick check avoids a copy.
    if (norm->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) continue;
    err = U_ZERO_ERROR;
    std::string out;
    out.reserve(cur.size() + 16);
    icu::StringByteSink<std::string> sink(&out);
    norm->normalizeUTF8(0, piece, sink, nullptr, err);
    if (U_FAILURE(err))
      return Internal(std::string("ICU normalisation failed: ") + u_errorName(err));
    cur = std::move(out);
  }
  return cur;
}

}  // namespace vls::tok
