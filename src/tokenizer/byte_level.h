#pragma once
// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one
// printable Unicode character (bytes 33..126, 161..172 and 174..255 as
// themselves, the rest as U+0100 onwards in byte order).

#include <array>
#include <cstdint>
#include <string>

namespace loom::tokenizer {

// UTF-8 text of the character that stands for byte `b`.
const std::string& ByteToUnicode(uint8_t b);

// Code point of the character that stands for byte `b`.
uint32_t ByteToCodePoint(uint8_t b);

// Byte that code point `cp` stands for, or -1 when `cp` is not in the alphabet.
int CodePointToByte(uint32_t cp);

}  // namespace loom::tokenizer
