// tokenizer.json loading on arbitrary text: a tokenizer or an error naming
// the field, never a crash. A tokenizer that loads must encode and decode.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tokenizer = loom::tokenizer::Tokenizer::FromJson(text, "fuzz");
  if (!tokenizer.ok()) return 0;
  auto ids = (*tokenizer)->Encode("Compute: 12+34 <think>héllo</think>\n");
  if (ids.ok()) (void)(*tokenizer)->Decode(*ids);
  return 0;
}
