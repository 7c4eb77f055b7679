#include "tokenizer/jinja_lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja_value.h"
#include "tokenizer/utf8.h"

namespace vls::jinja {
namespace {

// Python's str.rstrip() with no argument.
std::string RStripPy(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t k = start;
    if (!IsPySpace(tok::NextCodePoint(s, &k))) break;
    end = start;
  }
  return std::string(s.substr(0, end));
}

bool AllPySpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (!IsPySpace(tok::NextCodePoint(s, &i))) return false;
  }
  return true;
}

// Consumes Python whitespace from s[*pos].
void SkipPySpace(std::string_view s, size_t* pos) {
  while (*pos < s.size()) {
    size_t k = *pos;
    if (!IsPySpace(tok::NextCodePoint(s, &k))) break;
    *pos = k;
  }
}

// Decodes a Python string literal body (escapes as in Python; unknown ones kept verbatim).
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char e = s[++i];
    auto hex = [&](int n) -> int64_t {
      int64_t v = 0;
      for (int k = 1; k <= n; ++k) {
        if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) return -1;
        const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + k])));
        v = v * 16 + (h <= '9' ? h - '0' : h - 'a' + 10);
      }
      return v;
    };
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case 'a': out.push_back('\a'); break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case '\n': break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const int64_t v = hex(n);
        if (v < 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
          out.push_back('\\');
          out.push_back(e);
        } else {
          tok::AppendUtf8(static_cast<char32_t>(v), &out);
          i += n;
        }
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = 0;
          int n = 0;
          while (n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7') {
            v = v * 8 + (s[i] - '0');
            ++i;
            ++n;
          }
          --i;
          tok::AppendUtf8(static_cast<char32_t>(v), &out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& opt) : src_(std::move(source)), opt_(opt) {}

  StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t start = src_.find('{', pos_);
      size_t tag = std::string::npos;
      for (size_t p = start; p != std::string::npos && p + 1 < src_.size();
           p = src_.find('{', p + 1)) {
        const char c = src_[p + 1];
        if (c == '{' || c == '%' || c == '#') {
          tag = p;
          break;
        }
      }
      if (tag == std::string::npos) {
        Emit(TokKind::kData, src_.substr(pos_));
        break;
      }
      std::string data = src_.substr(pos_, tag - pos_);
      const char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      if (sign == '-') {
        data = RStripPy(data);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t l_pos = data.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting) && l_pos < data.size() &&
            AllPySpace(std::string_view(data).substr(l_pos))) {
          data.resize(l_pos);
        }
      }
      CountLines(src_.substr(pos_, tag - pos_));
      if (!data.empty()) Emit(TokKind::kData, data);
      pos_ = p;
      if (kind == '#') {
        VLS_RETURN_IF_ERROR(Comment(&line_starting));
      } else {
        VLS_RETURN_IF_ERROR(Tag(kind == '%', &line_starting));
      }
    }
    Emit(TokKind::kEof, "");
    return std::move(tokens_);
  }

 private:
  void Emit(TokKind k, std::string text) {
    Token t;
    t.kind = k;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }
  void CountLines(std::string_view s) {
    for (char c : s) line_ += c == '\n' ? 1 : 0;
  }
  Status Error(const std::string& msg) const {
    return InvalidArgument("template line " + std::to_string(line_) + ": " + msg);
  }

  // After "-}}"/"-%}"/"-#}": all whitespace; after "%}"/"#}" with trim_blocks: one newline.
  void TagEnd(bool strip, bool block, bool* line_starting) {
    const size_t before = pos_;
    if (strip) {
      SkipPySpace(src_, &pos_);
    } else if (block && opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    CountLines(std::string_view(src_).substr(before, pos_ - before));
    *line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  Status Comment(bool* line_starting) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error("unterminated comment");
    const bool strip = end > pos_ && src_[end - 1] == '-';
    CountLines(std::string_view(src_).substr(pos_, end - pos_));
    pos_ = end + 2;
    TagEnd(strip, true, line_starting);
    return Status::Ok();
  }

  Status Tag(bool block, bool* line_starting) {
    Emit(block ? TokKind::kBlockBegin : TokKind::kVarBegin, "");
    const size_t first_token = tokens_.size();
    int depth = 0;
    while (true) {
      // Whitespace inside a tag separates tokens.
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
        line_ += src_[pos_] == '\n' ? 1 : 0;
        ++pos_;
      }
      if (pos_ >= src_.size()) return Error(block ? "unterminated {% tag" : "unterminated {{ tag");
      const std::string_view rest = std::string_view(src_).substr(pos_);
      if (depth == 0) {
        const std::string_view close = block ? "%}" : "}}";
        const bool strip = rest.size() > 2 && rest[0] == '-' && rest.substr(1, 2) == close;
        if (strip || rest.substr(0, 2) == close) {
          pos_ += strip ? 3 : 2;
          Emit(block ? TokKind::kBlockEnd : TokKind::kVarEnd, "");
          TagEnd(strip, block, line_starting);
          break;
        }
      }
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        Emit(TokKind::kName, std::string(rest.substr(0, n)));
        pos_ += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        VLS_RETURN_IF_ERROR(Number(rest));
      } else if (c == '\'' || c == '"') {
        size_t n = 1;
        while (n < rest.size() && rest[n] != c) n += rest[n] == '\\' ? 2 : 1;
        if (n >= rest.size()) return Error("unterminated string literal");
        Emit(TokKind::kString, Unescape(rest.substr(1, n - 1)));
        CountLines(rest.substr(0, n));
        pos_ += n + 1;
      } else {
        static constexpr std::string_view kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (std::string_view o : kOps2) {
          if (rest.substr(0, 2) == o) op = std::string(o);
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=.,:|()[]{};").find(c) == std::string_view::npos) {
            return Error(std::string("unexpected character '") + c + "' in tag");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        Emit(TokKind::kOp, op);
        pos_ += op.size();
      }
    }
    // {% raw %} ... {% endraw %}: the body is data.
    if (block && tokens_.size() == first_token + 2 && tokens_[first_token].kind == TokKind::kName &&
        tokens_[first_token].text == "raw") {
      tokens_.resize(first_token - 1);
      size_t search = pos_;
      while (true) {
        const size_t at = src_.find("{%", search);
        if (at == std::string::npos) return Error("{% raw %} without {% endraw %}");
        size_t q = at + 2;
        const bool lstrip = q < src_.size() && src_[q] == '-';
        if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
        while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
        if (src_.compare(q, 6, "endraw") != 0) {
          search = at + 2;
          continue;
        }
        q += 6;
        while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
        const bool strip = q < src_.size() && src_[q] == '-';
        if (strip) ++q;
        if (src_.compare(q, 2, "%}") != 0) return Error("malformed {% endraw %}");
        std::string body = src_.substr(pos_, at - pos_);
        if (lstrip) body = RStripPy(body);
        CountLines(body);
        if (!body.empty()) Emit(TokKind::kData, body);
        pos_ = q + 2;
        TagEnd(strip, true, line_starting);
        break;
      }
    }
    return Status::Ok();
  }

  Status Number(std::string_view rest) {
    size_t n = 0;
    auto digits = [&]() {
      while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) ||
                                 (rest[n] == '_' && n + 1 < rest.size() &&
                                  std::isdigit(static_cast<unsigned char>(rest[n + 1]))))) {
        ++n;
      }
    };
    digits();
    bool is_float = false;
    if (n + 1 < rest.size() && rest[n] == '.' &&
        std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
      is_float = true;
      ++n;
      digits();
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t m = n + 1;
      if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
      if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
        is_float = true;
        n = m;
        digits();
      }
    }
    std::string text;
    for (char c : rest.substr(0, n)) {
      if (c != '_') text.push_back(c);
    }
    Token t;
    t.line = line_;
    t.text = text;
    if (is_float) {
      t.kind = TokKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokKind::kInt;
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error("integer literal " + text + " is too large");
    }
    tokens_.push_back(std::move(t));
    pos_ += n;
    return Status::Ok();
  }

  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options) {
  if (!tok::IsValidUtf8(source)) return InvalidArgument("template is not valid UTF-8");
  // Newlines are normalised to "\n" and one trailing newline is dropped, as Jinja2 does.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).Run();
}

}  // namespace vls::jinja
