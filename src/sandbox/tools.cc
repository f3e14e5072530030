#include "loom/sandbox/tools.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "loom/tokenizer/utf8.h"

namespace loom::sandbox {
namespace {

using nlohmann::json;

v1::ToolResult NotRun(const v1::ToolCall& call, std::string error) {
  v1::ToolResult result;
  result.set_call_id(call.id());
  result.set_name(call.name());
  result.set_exit_code(-1);
  result.set_error(std::move(error));
  return result;
}

// The string argument `key`, or an error naming the tool and key.
absl::StatusOr<std::string> StringArg(const json& args, const v1::ToolCall& call, const char* key) {
  auto it = args.find(key);
  if (it == args.end() || !it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.name(), ": argument '", key, "' (a string) is required"));
  }
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<ToolInvocation> ParseToolCall(const v1::ToolCall& call, double max_timeout_s) {
  json args = json::parse(call.arguments_json().empty() ? "{}" : call.arguments_json(), nullptr,
                          /*allow_exceptions=*/false);
  if (!args.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.name(), ": arguments are not a JSON object"));
  }
  const std::string& name = call.name();
  ToolInvocation run;
  run.timeout_s = max_timeout_s;
  if (name == "bash") {
    auto command = StringArg(args, call, "command");
    if (!command.ok()) return command.status();
    run.command = *command;
    auto t = args.find("timeout_s");
    if (t != args.end() && t->is_number() && t->get<double>() > 0) {
      run.timeout_s = std::min(run.timeout_s, t->get<double>());
    }
  } else if (name == "python") {
    auto code = StringArg(args, call, "code");
    if (!code.ok()) return code.status();
    run.command = "exec python3 -";
    run.stdin_text = *code;
  } else if (name == "read_file") {
    auto path = StringArg(args, call, "path");
    if (!path.ok()) return path.status();
    run.command = "cat -- \"$1\"";
    run.args = {*path};
  } else if (name == "write_file") {
    auto path = StringArg(args, call, "path");
    if (!path.ok()) return path.status();
    auto content = StringArg(args, call, "content");
    if (!content.ok()) return content.status();
    run.command = "mkdir -p -- \"$(dirname -- \"$1\")\" && cat > \"$1\"";
    run.args = {*path};
    run.stdin_text = *content;
  } else if (name == "submit") {
    auto answer = StringArg(args, call, "answer");
    if (!answer.ok()) return answer.status();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tool '", name, "' (bash, python, read_file, write_file, submit)"));
  }
  return run;
}

v1::ToolResult ExecuteTool(const Sandbox& sandbox, const v1::ToolCall& call, double max_timeout_s) {
  absl::StatusOr<ToolInvocation> run = ParseToolCall(call, max_timeout_s);
  if (!run.ok()) return NotRun(call, std::string(run.status().message()));
  if (call.name() == "submit") {
    v1::ToolResult result;
    result.set_call_id(call.id());
    result.set_name(call.name());
    result.set_stdout("submitted");
    return result;
  }
  return ToolResultOf(call, sandbox.Bash(run->command, run->timeout_s, run->args, run->stdin_text));
}

v1::ToolResult ToolResultOf(const v1::ToolCall& call, const absl::StatusOr<ProcessResult>& run) {
  if (!run.ok()) return NotRun(call, std::string(run.status().message()));
  v1::ToolResult result;
  result.set_call_id(call.id());
  result.set_name(call.name());
  result.set_exit_code(run->exit_code);
  result.set_stdout(tokenizer::RepairUtf8(run->stdout_text));
  result.set_stderr(tokenizer::RepairUtf8(run->stderr_text));
  result.set_timed_out(run->timed_out);
  result.set_truncated(run->truncated);
  result.set_limit(run->limit);
  result.set_duration_ms(run->duration_ms);
  return result;
}

}  // namespace loom::sandbox
