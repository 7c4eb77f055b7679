#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace vls::tok {
namespace {

struct Tables {
  static constexpr char32_t kAlphabetEnd = 256 + 68;  // 68 bytes are not printable
  std::array<char32_t, 256> byte_to_char{};
  std::array<int, kAlphabetEnd> char_to_byte{};
  Tables() {
    char_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      char_to_byte[byte_to_char[b]] = b;
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToChar(unsigned char b) { return GetTables().byte_to_char[b]; }

std::optional<unsigned char> CharToByte(char32_t c) {
  const Tables& t = GetTables();
  if (c >= Tables::kAlphabetEnd || t.char_to_byte[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.char_to_byte[c]);
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) AppendUtf8(ByteToChar(static_cast<unsigned char>(ch)), &out);
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view text) {
  if (!IsValidUtf8(text)) return std::nullopt;
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b = CharToByte(NextCodePoint(text, &i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace vls::tok
