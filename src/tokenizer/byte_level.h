// The GPT-2 byte-level alphabet: each byte 0..255 is shown as one printable code point so that
// BPE vocabularies can be stored as text.
#ifndef VLSTACK_TOKENIZER_BYTE_LEVEL_H_
#define VLSTACK_TOKENIZER_BYTE_LEVEL_H_

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace vls::tok {

// Code point that stands for byte b.
char32_t ByteToChar(unsigned char b);
// The byte a code point stands for, if it is in the alphabet.
std::optional<unsigned char> CharToByte(char32_t c);

// Byte-level text of raw bytes ("Ġ" for a space, ...).
std::string BytesToByteLevel(std::string_view bytes);
// Raw bytes of byte-level text; nullopt if a code point is outside the alphabet or the text is
// not valid UTF-8.
std::optional<std::string> ByteLevelToBytes(std::string_view text);

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_BYTE_LEVEL_H_
