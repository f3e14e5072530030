#pragma once
// Helpers for chat tests: messages from JSON text, prompts as strings.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/chat/encoder.h"
#include "loom/chat/message.h"

namespace loom::chat::testing {

inline std::vector<Message> Messages(const std::string& json) {
  auto messages = MessagesFromJson(OrderedJson::parse(json));
  EXPECT_TRUE(messages.ok()) << messages.status();
  return messages.ok() ? *messages : std::vector<Message>{};
}

inline std::string Prompt(const std::string& json, EncodeOptions options = {}) {
  auto prompt = EncodePrompt(Messages(json), options);
  EXPECT_TRUE(prompt.ok()) << prompt.status();
  return prompt.ok() ? *prompt : "";
}

inline EncodeOptions Chat() {
  EncodeOptions o;
  o.thinking_mode = ThinkingMode::kChat;
  return o;
}

inline std::string DataPath(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/chat/data/" + name;
}

}  // namespace loom::chat::testing
