#pragma once
// Parses a DeepSeek-V4 completion (the model's text after the assistant
// prefix) into an assistant message (shared/dsv4-format.md, "Parsing").
// Total: every input, however malformed, yields a message or an
// INVALID_ARGUMENT status whose message is the reason; it never throws or
// crashes. Stateless; thread-safe.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"

namespace loom::chat {

struct ParsedMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;  // arguments: JSON text {"K": V, ...}; id empty
};

absl::StatusOr<ParsedMessage> ParseCompletion(std::string_view text, ThinkingMode mode);

// {"role": "assistant", "content", "reasoning_content",
//  "tool_calls": [{"type": "function", "function": {"name", "arguments"}}]}
OrderedJson ParsedMessageToJson(const ParsedMessage& message);

}  // namespace loom::chat
