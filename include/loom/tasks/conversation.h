#pragma once
// An agent episode's conversation as both sides write it: the worker's
// scaffold (loom/sandbox/scaffold.h) sends these messages, and the trainer
// rebuilds the same ones for SFT demonstrations (loom/agent/demonstration.h)
// without linking the worker side. The system prompt with the tool list, the
// problem as the user turn, each tool result as a tool message, the answer
// a submit call carries, and the scaffold's default limits.

#include <optional>
#include <string>
#include <vector>

#include "loom/v1/sandbox.pb.h"

namespace loom::tasks {

// The system prompt used when the task's options give none.
const char* DefaultSystemPrompt();

// The OpenAI tool list (JSON array) the scaffold puts on its system message;
// the trainer's chat module renders it into the prompt.
const std::string& ToolSchemasJson();

// The messages an episode of `task` opens with: the system prompt (with the
// tool schemas unless `options` hide them) and the problem as the user turn.
std::vector<v1::Message> OpeningMessages(const v1::Task& task, const v1::ScaffoldOptions& options);

// The text of the tool message the model sees for `result`.
std::string RenderToolResult(const v1::ToolResult& result);

// The tool message that answers `call` with `result`.
v1::Message ToolMessage(const v1::ToolCall& call, const v1::ToolResult& result);

// The submitted answer of a submit call ("" if the arguments are unusable).
std::string SubmittedAnswer(const v1::ToolCall& call);

// The user message that answers a completion that did not parse (`why`: the
// parser's reason); and back, the reason when `message` is such a message.
v1::Message FormatErrorMessage(const std::string& why);
std::optional<std::string> FormatErrorReason(const v1::Message& message);

// Fills defaults (max_steps 8, max_time_s 300, tool_timeout_s 30).
v1::ScaffoldOptions WithDefaults(const v1::ScaffoldOptions& options);

}  // namespace loom::tasks
