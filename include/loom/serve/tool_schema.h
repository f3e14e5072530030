#pragma once
// Checks a tool call the model made against the tools the request offered:
// the tool exists, and its arguments satisfy the tool's JSON schema. A call
// that fails is a format error: the turn reaches the harness as plain text
// (CompletionView::Finish with this check), never as a call its tool cannot
// take.
//
// The schema keywords checked are the ones agent harnesses' tool schemas
// use: type (a name or a list), properties, required,
// additionalProperties: false, items, enum, const, anyOf, oneOf, and
// minimum / maximum, minLength / maxLength, minItems / maxItems. Other
// keywords ($schema, description, default, format, ...) are not checked.
// Stateless functions; thread-safe.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "loom/chat/message.h"

namespace loom::serve {

// `tools`: the request's OpenAI-style tool list (chat::Message::tools), or
// none. INVALID_ARGUMENT naming the call and the argument at fault
// ("Bash: arguments.command: must be a string").
absl::Status CheckToolCall(const chat::ToolCall& call,
                           const std::optional<chat::OrderedJson>& tools);

// Every call in turn; the first failure.
absl::Status CheckToolCalls(const std::vector<chat::ToolCall>& calls,
                            const std::optional<chat::OrderedJson>& tools);

}  // namespace loom::serve
