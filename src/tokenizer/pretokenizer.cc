#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/json_fields.h"

namespace vls::tok {
namespace {

// Oniguruma's \s for Unicode text: the White_Space property.
constexpr std::string_view kOnigSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// GPT-2's pattern, used by ByteLevel with use_regex = true.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string PcreError(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

StatusOr<std::string> TranslateOnigPattern(std::string_view p) {
  std::string out;
  bool in_class = false;
  size_t class_start = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kOnigSpace) : "[" + std::string(kOnigSpace) + "]";
      } else if (e == 'S') {
        if (in_class) return Unimplemented("split regex: \\S inside a character class");
        out += "[^" + std::string(kOnigSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = out.size() + 1;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out += '^';
        ++i;
        ++class_start;
      }
      continue;
    }
    if (in_class && c == ']' && out.size() > class_start) in_class = false;
    out += c;
  }
  return out;
}

struct SplitRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

SplitRegex::~SplitRegex() = default;

StatusOr<std::unique_ptr<SplitRegex>> SplitRegex::Compile(std::string_view pattern) {
  VLS_ASSIGN_OR_RETURN(std::string translated, TranslateOnigPattern(pattern));
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr) {
    return InvalidArgument("split regex does not compile at offset " + std::to_string(offset) +
                           ": " + PcreError(err));
  }
  std::unique_ptr<SplitRegex> re(new SplitRegex());
  re->impl_ = std::make_unique<Impl>();
  re->impl_->code = code;
  // JIT is an optimisation; the interpreter gives the same matches if it is unavailable.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return re;
}

Status SplitRegex::Split(std::string_view text, std::vector<std::string_view>* out) const {
  struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* c)
        : md(pcre2_match_data_create_from_pattern(c, nullptr)) {}
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
  };
  MatchData data(impl_->code);
  if (data.md == nullptr) return ResourceExhausted("split regex: out of memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t emitted = 0;
  while (pos < text.size()) {
    const int rc =
        pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return ResourceExhausted("split regex failed: " + PcreError(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t start = ov[0];
    const size_t end = ov[1];
    if (end <= start) {
      // An empty match splits nothing; step over one code point and search again.
      ++pos;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (start > emitted) out->push_back(text.substr(emitted, start - emitted));
    out->push_back(text.substr(start, end - start));
    emitted = end;
    pos = end;
  }
  if (emitted < text.size()) out->push_back(text.substr(emitted));
  return Status::Ok();
}

StatusOr<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& j) {
  std::vector<const nlohmann::json*> steps;
  VLS_RETURN_IF_ERROR(FlattenSequence(j, "pre_tokenizer", "pretokenizers", &steps));
  PreTokenizer pt;
  bool saw_byte_level = false;
  for (const nlohmann::json* step : steps) {
    const nlohmann::json& s = *step;
    std::string type;
    VLS_RETURN_IF_ERROR(ComponentType(s, "pre_tokenizer", &type));
    const std::string shown = JsonSnippet(nlohmann::json(type));
    if (saw_byte_level) {
      return Unimplemented("pre_tokenizer step " + shown + " after ByteLevel is not supported");
    }
    if (type == "Split") {
      const nlohmann::json* pat = Field(s, "pattern");
      const nlohmann::json* regex =
          pat != nullptr && pat->is_object() ? Field(*pat, "Regex") : nullptr;
      if (regex == nullptr) {
        return Unimplemented("pre_tokenizer Split: only {\"Regex\": ...} patterns are supported");
      }
      std::string pattern;
      VLS_RETURN_IF_ERROR(ReadJsonString(*regex, "pre_tokenizer Split pattern.Regex", &pattern));
      if (pattern.size() > kMaxSplitRegexBytes) {
        return InvalidArgument("pre_tokenizer Split pattern.Regex has " +
                               std::to_string(pattern.size()) + " bytes, over the bound " +
                               std::to_string(kMaxSplitRegexBytes) + " (kMaxSplitRegexBytes)");
      }
      std::string behavior;
      VLS_RETURN_IF_ERROR(OptionalString(s, "pre_tokenizer Split", "behavior", &behavior));
      if (behavior != "Isolated") {
        return Unimplemented("pre_tokenizer Split behavior " +
                             JsonSnippet(nlohmann::json(behavior)) + " is not supported");
      }
      bool invert = false;
      VLS_RETURN_IF_ERROR(OptionalBool(s, "pre_tokenizer Split", "invert", &invert));
      if (invert) return Unimplemented("pre_tokenizer Split invert=true");
      auto re = SplitRegex::Compile(pattern);
      if (!re.ok()) return re.status().WithContext("pre_tokenizer Split");
      pt.splits_.push_back(std::move(*re));
    } else if (type == "ByteLevel") {
      bool add_prefix_space = false;
      bool use_regex = true;
      VLS_RETURN_IF_ERROR(
          OptionalBool(s, "pre_tokenizer ByteLevel", "add_prefix_space", &add_prefix_space));
      VLS_RETURN_IF_ERROR(OptionalBool(s, "pre_tokenizer ByteLevel", "use_regex", &use_regex));
      if (add_prefix_space) return Unimplemented("pre_tokenizer ByteLevel add_prefix_space=true");
      if (use_regex) {
        VLS_ASSIGN_OR_RETURN(auto re, SplitRegex::Compile(kGpt2Pattern));
        pt.splits_.push_back(std::move(re));
      }
      saw_byte_level = true;
    } else {
      return Unimplemented("pre_tokenizer type " + shown + " is not supported");
    }
  }
  if (!saw_byte_level) return Unimplemented("pre_tokenizer without a ByteLevel step");
  return pt;
}

Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* out) const {
  out->clear();
  if (text.empty()) return Status::Ok();
  out->push_back(text);
  std::vector<std::string_view> next;
  for (const auto& re : splits_) {
    next.clear();
    for (std::string_view piece : *out) VLS_RETURN_IF_ERROR(re->Split(piece, &next));
    out->swap(next);
  }
  return Status::Ok();
}

}  // namespace vls::tok
