#pragma once
// The trainer-side bridge between the worker's message protocol (loom.v1)
// and the chat module's DeepSeek-V4 format: worker messages become
// chat::Messages for the encoder (the tool list in `tools_json` is rendered
// by the chat module), and a completion's text becomes the GenerateReply the
// worker expects (a parse failure becomes `parse_error`, which the worker
// turns into a format-error observation). Stateless; thread-safe.

#include <string_view>

#include "absl/status/statusor.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

// INVALID_ARGUMENT for an unknown role or a `tools_json` that is not JSON.
absl::StatusOr<chat::Message> ToChatMessage(const v1::Message& message);

// Parses `completion` (the text after the assistant prefix). Tool calls get
// ids "call_<turn>_<i>", which the worker echoes on the tool results.
v1::GenerateReply ReplyFromCompletion(std::string_view completion, chat::ThinkingMode mode,
                                      int turn);

}  // namespace loom::agent
