#include "loom/tokenizer/utf8.h"

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

int Utf8SequenceAt(std::string_view text, size_t pos) {
  const uint8_t b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return 1;
  const int len = SequenceLength(b0);
  if (len == 0 || pos + len > text.size()) return 0;
  if (!SecondByteOk(b0, static_cast<uint8_t>(text[pos + 1]))) return 0;
  for (int k = 2; k < len; ++k) {
    if ((static_cast<uint8_t>(text[pos + k]) & 0xC0) != 0x80) return 0;
  }
  return len;
}

absl::Status ValidateUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const int len = Utf8SequenceAt(text, i);
    if (len == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: bad byte sequence at byte offset ", i));
    }
    i += len;
  }
  return absl::OkStatus();
}

std::string RepairUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const int len = Utf8SequenceAt(text, i);
    if (len > 0) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
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
