#pragma once
// JSON as the DeepSeek-V4 prompts show it: Python's json.dumps defaults with
// ensure_ascii=False — ", " and ": " separators, key order kept, non-ASCII
// kept as is: {"a": 1, "b": [1, 2]}.

#include <string>

#include "loom/chat/message.h"

namespace loom::chat {

std::string PromptJson(const OrderedJson& value);

}  // namespace loom::chat
