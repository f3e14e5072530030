// Chat messages JSON (a conversation with tools, as `loom chat encode`
// reads it): parsed and, when valid, rendered in the DeepSeek-V4 format in
// both modes. Never a crash.

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/chat/encoder.h"
#include "loom/chat/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto doc = loom::chat::OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  auto messages = loom::chat::ConversationFromJson(doc);
  if (!messages.ok()) return 0;
  loom::chat::EncodeOptions options;
  for (auto mode : {loom::chat::ThinkingMode::kThinking, loom::chat::ThinkingMode::kChat}) {
    options.thinking_mode = mode;
    (void)loom::chat::EncodePrompt(*messages, options);
  }
  return 0;
}
