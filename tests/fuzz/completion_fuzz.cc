// Parsing model output (a completion, DSML tool calls included) in both
// thinking modes: a message or an error, never a crash.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/chat/parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto mode : {loom::chat::ThinkingMode::kThinking, loom::chat::ThinkingMode::kChat}) {
    (void)loom::chat::ParseCompletion(text, mode);
  }
  return 0;
}
