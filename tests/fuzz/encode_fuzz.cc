// Encoding arbitrary bytes with the tiny byte-level tokenizer and the real
// DeepSeek-V3 one: valid UTF-8 must decode back to itself; invalid UTF-8
// must be a clear error or bytes, never a crash.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "loom/tokenizer/tiny.h"
#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/test_paths.h"

namespace {

using loom::tokenizer::Tokenizer;

// Well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF), checked here independently of the tokenizer's own decoder.
bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) {
      extra = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

void RoundTrip(const Tokenizer& tokenizer, const std::string& text) {
  for (bool ordinary : {false, true}) {
    auto ids = ordinary ? tokenizer.EncodeOrdinary(text) : tokenizer.Encode(text);
    if (!ids.ok()) continue;
    auto decoded = tokenizer.Decode(*ids);
    if (ValidUtf8(text) && (!decoded.ok() || *decoded != text)) {
      std::abort();  // a valid string that does not come back
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> tiny =
      std::move(*Tokenizer::FromJson(loom::tokenizer::TinyTokenizerJson(), "tiny"));
  static const std::unique_ptr<Tokenizer> deepseek = [] {
    auto loaded = Tokenizer::FromFile(loom::tokenizer::testing::DeepSeekV3Json());
    return loaded.ok() ? std::move(*loaded) : nullptr;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  RoundTrip(*tiny, text);
  if (deepseek) RoundTrip(*deepseek, text);
  return 0;
}
