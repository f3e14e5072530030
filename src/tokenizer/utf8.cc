#include "tokenizer/utf8.h"

#include "absl/strings/str_cat.h"

namespace loom::tokenizer {
namespace {

// Length of the sequence led by byte `b`, or 0 when `b` cannot lead one.
int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether the second byte `b1` is allowed after lead byte `b0` (rules out
// overlongs, surrogates and code points past U+10FFFF).
bool SecondByteOk(uint8_t b0, uint8_t b1) {
  if ((b1 & 0xC0) != 0x80) return false;
  if (b0 == 0xE0) return b1 >= 0xA0;
  if (b0 == 0xED) return b1 <= 0x9F;
  if (b0 == 0xF0) return b1 >= 0x90;
  if (b0 == 0xF4) return b1 <= 0x8F;
  return true;
}

}  // namespace

absl::Status ValidateUtf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const uint8_t b0 = static_cast<uint8_t>(text[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    const int len = SequenceLength(b0);
    bool ok = len > 0 && i + len <= n && SecondByteOk(b0, static_cast<uint8_t>(text[i + 1]));
    for (int k = 2; ok && k < len; ++k) ok = (static_cast<uint8_t>(text[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: bad byte sequence at byte offset ", i));
    }
    i += len;
  }
  return absl::OkStatus();
}

uint32_t NextCodePoint(std::string_view text, size_t* pos) {
  const uint8_t b0 = static_cast<uint8_t>(text[*pos]);
  const int len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[*pos + k]) & 0x3F);
  *pos += len;
  return cp;
}

}  // namespace loom::tokenizer
