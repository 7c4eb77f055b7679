#include "tokenizer/utf8.h"

namespace vls::tok {
namespace {

// Bounds of the second byte for a lead byte (Unicode Table 3-7); the rest are 80..BF.
bool SecondByteRange(unsigned char lead, unsigned char* lo, unsigned char* hi, size_t* len) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    *len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    *len = 3;
    if (lead == 0xE0) *lo = 0xA0;
    if (lead == 0xED) *hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    *len = 4;
    if (lead == 0xF0) *lo = 0x90;
    if (lead == 0xF4) *hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

// How many bytes from s[i] match a valid prefix of a sequence (1..len), and its full length.
size_t ValidPrefix(std::string_view s, size_t i, size_t* full) {
  const auto lead = static_cast<unsigned char>(s[i]);
  *full = 1;
  if (lead < 0x80) return 1;
  unsigned char lo = 0;
  unsigned char hi = 0;
  size_t len = 0;
  if (!SecondByteRange(lead, &lo, &hi, &len)) {
    *full = 0;
    return 1;
  }
  *full = len;
  size_t n = 1;
  while (n < len && i + n < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    if (n == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t ValidSequenceLength(std::string_view s, size_t i) {
  size_t full = 0;
  const size_t n = ValidPrefix(s, i, &full);
  return n == full ? n : 0;
}

size_t InvalidSubpartLength(std::string_view s, size_t i) {
  size_t full = 0;
  return ValidPrefix(s, i, &full);
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = ValidSequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = ValidSequenceLength(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      AppendUtf8(kReplacementChar, &out);
      i += InvalidSubpartLength(s, i);
    }
  }
  return out;
}

size_t IncompleteTailLength(std::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can start an incomplete one.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0xC2 || b > 0xF4) continue;  // not a multi-byte lead
    size_t full = 0;
    const size_t n = ValidPrefix(s, i, &full);
    if (i + n == s.size() && n < full) return n;
  }
  return 0;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  if (b0 < 0x80) {
    ++*i;
    return b0;
  }
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  if (*i + len > s.size()) len = s.size() - *i;
  char32_t cp = b0 & (0x3F >> (len - 1));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

}  // namespace vls::tok
