#pragma once
// Renders preprocessed messages (see preprocess.h) into prompt pieces,
// one message at a time (dsv4-format.md, encoding rules 4-6).

#include <vector>

#include "chat/prompt_builder.h"
#include "loom/chat/encoder.h"

namespace loom::chat {

struct RenderContext {
  bool thinking = true;       // thinking mode
  bool drop_thinking = true;  // after the "tools turn it off" rule
  int last_user = -1;         // LastUserIndex of the rendered list
  ReasoningEffort effort;
};

void RenderMessage(const std::vector<Message>& messages, size_t index, const RenderContext& context,
                   PromptBuilder* out);

}  // namespace loom::chat
