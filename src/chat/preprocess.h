#pragma once
// The format's rewriting steps before rendering (dsv4-format.md, encoding
// rules 1-3): merge tool messages into user messages, order tool results by
// call order, and drop earlier reasoning.

#include <vector>

#include "loom/chat/message.h"

namespace loom::chat {

// Rule 1: tool messages become tool-result blocks of a user message; a plain
// user message (without task) right after them joins as a text block.
std::vector<Message> MergeToolMessages(const std::vector<Message>& messages);

// Rule 2: in each merged user message, tool results follow the order of the
// most recent assistant's tool_calls ids (stable; unknown ids rank as 0).
void SortToolResults(std::vector<Message>* messages);

// Index of the last user or developer message, or -1.
int LastUserIndex(const std::vector<Message>& messages);

// Rule 3: before the last user/developer message keep user, system, tool
// and latest_reminder messages, keep assistants without reasoning, and
// remove the rest.
std::vector<Message> DropThinking(const std::vector<Message>& messages);

}  // namespace loom::chat
