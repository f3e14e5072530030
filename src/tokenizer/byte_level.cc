#include "tokenizer/byte_level.h"

#include <unordered_map>

namespace loom::tokenizer {
namespace {

bool PrintsAsItself(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

std::string EncodeUtf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

struct Tables {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> text;
  std::unordered_map<uint32_t, int> byte_of;
  Tables() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      code_point[b] = PrintsAsItself(b) ? static_cast<uint32_t>(b) : next++;
      text[b] = EncodeUtf8(code_point[b]);
      byte_of[code_point[b]] = b;
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t b) { return GetTables().text[b]; }

uint32_t ByteToCodePoint(uint8_t b) { return GetTables().code_point[b]; }

int CodePointToByte(uint32_t cp) {
  const auto& map = GetTables().byte_of;
  auto it = map.find(cp);
  return it == map.end() ? -1 : it->second;
}

}  // namespace loom::tokenizer
