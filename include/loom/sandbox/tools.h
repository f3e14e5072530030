#pragma once
// The tools an agent calls inside its sandbox: bash(command, timeout_s),
// python(code), read_file(path), write_file(path, content), submit(answer).
// Every one runs inside the sandbox (paths are the sandbox's, /workspace
// relative), so a tool can never touch the worker's files.
// Their schemas, as the model sees them, are tasks::ToolSchemasJson()
// (loom/tasks/conversation.h), which the trainer side reads too.

#include <string>
#include <string_view>
#include <vector>

#include "loom/sandbox/sandbox.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::sandbox {

// What a tool call runs in the sandbox: a bash command with its arguments
// ($1..) and stdin, and its timeout (the call's own, capped by
// `max_timeout_s`). submit runs nothing (an empty command).
struct ToolInvocation {
  std::string command;
  std::vector<std::string> args;
  std::string stdin_text;
  double timeout_s = 0;
};

// INVALID_ARGUMENT naming the tool and argument for arguments that are not a
// JSON object, a missing or mistyped argument, or an unknown tool.
absl::StatusOr<ToolInvocation> ParseToolCall(const v1::ToolCall& call, double max_timeout_s);

// Runs one call. Bad arguments or an unknown tool give exit_code -1 and
// `error`; a command's own failure is its exit code. `max_timeout_s` caps
// the timeout a bash call may ask for. submit only echoes its answer.
// stdout and stderr are repaired (tokenizer::RepairUtf8): protobuf strings
// must be UTF-8, and neither a model nor the commands it runs keep to that.
// An untrained model emits arbitrary bytes, `sed` quotes them back in its
// error messages, and a message with such a string does not parse at the
// other end of the stream.
v1::ToolResult ExecuteTool(const Sandbox& sandbox, const v1::ToolCall& call, double max_timeout_s);

// The result of `call` as the command `run` ended; a command that could not
// start gives exit_code -1 and `error`. ExecuteTool's results are made so.
v1::ToolResult ToolResultOf(const v1::ToolCall& call, const absl::StatusOr<ProcessResult>& run);

}  // namespace loom::sandbox
