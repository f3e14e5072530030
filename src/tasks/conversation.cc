#include "loom/tasks/conversation.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom::tasks {
namespace {

using nlohmann::json;

constexpr char kSchemas[] = R"([
{"type": "function", "function": {
  "name": "bash",
  "description": "Run a bash command in /workspace and return its exit code, stdout and stderr.",
  "parameters": {"type": "object", "properties": {
    "command": {"type": "string", "description": "The command."},
    "timeout_s": {"type": "number", "description": "Wall-clock limit in seconds."}
  }, "required": ["command"]}}},
{"type": "function", "function": {
  "name": "python",
  "description": "Run a Python 3 program and return its output.",
  "parameters": {"type": "object", "properties": {
    "code": {"type": "string", "description": "The program."}
  }, "required": ["code"]}}},
{"type": "function", "function": {
  "name": "read_file",
  "description": "Return the content of a file.",
  "parameters": {"type": "object", "properties": {
    "path": {"type": "string", "description": "Path, relative to /workspace or absolute."}
  }, "required": ["path"]}}},
{"type": "function", "function": {
  "name": "write_file",
  "description": "Create or overwrite a file.",
  "parameters": {"type": "object", "properties": {
    "path": {"type": "string", "description": "Path, relative to /workspace or absolute."},
    "content": {"type": "string", "description": "The new content."}
  }, "required": ["path", "content"]}}},
{"type": "function", "function": {
  "name": "submit",
  "description": "Submit the final answer and end the episode.",
  "parameters": {"type": "object", "properties": {
    "answer": {"type": "string", "description": "The answer."}
  }, "required": ["answer"]}}}
])";

}  // namespace

const char* DefaultSystemPrompt() {
  return "You are an agent working in a Linux sandbox. Your files are in /workspace. Use the "
         "tools to inspect, compute and edit; when you are done, call submit with your final "
         "answer.";
}

const std::string& ToolSchemasJson() {
  static const std::string schemas = nlohmann::ordered_json::parse(kSchemas).dump();
  return schemas;
}

std::vector<v1::Message> OpeningMessages(const v1::Task& task, const v1::ScaffoldOptions& options) {
  v1::Message system;
  system.set_role("system");
  system.set_content(options.system_prompt().empty() ? DefaultSystemPrompt()
                                                     : options.system_prompt());
  if (!options.hide_tool_schemas()) system.set_tools_json(ToolSchemasJson());
  v1::Message user;
  user.set_role("user");
  user.set_content(task.problem());
  return {std::move(system), std::move(user)};
}

std::string RenderToolResult(const v1::ToolResult& result) {
  if (!result.error().empty()) return absl::StrCat("error: ", result.error());
  std::string text = result.stdout();
  if (!result.stderr().empty()) absl::StrAppend(&text, "\n[stderr]\n", result.stderr());
  if (result.timed_out()) absl::StrAppend(&text, "\n[timed out]");
  if (result.exit_code() != 0) absl::StrAppend(&text, "\n[exit code ", result.exit_code(), "]");
  return text;
}

v1::Message ToolMessage(const v1::ToolCall& call, const v1::ToolResult& result) {
  v1::Message tool;
  tool.set_role("tool");
  tool.set_tool_call_id(call.id());
  tool.set_content(RenderToolResult(result));
  *tool.mutable_result() = result;
  return tool;
}

std::string SubmittedAnswer(const v1::ToolCall& call) {
  json args = json::parse(call.arguments_json(), nullptr, false);
  if (!args.is_object()) return "";
  auto it = args.find("answer");
  if (it == args.end()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

v1::ScaffoldOptions WithDefaults(const v1::ScaffoldOptions& options) {
  v1::ScaffoldOptions out = options;
  if (out.max_steps() <= 0) out.set_max_steps(8);
  if (out.max_time_s() <= 0) out.set_max_time_s(300);
  if (out.tool_timeout_s() <= 0) out.set_tool_timeout_s(30);
  return out;
}

namespace {
constexpr char kFormatErrorLead[] = "Format error: your last message could not be parsed (";
constexpr char kFormatErrorTail[] =
    "). Reply with reasoning, then either tool calls in the DSML format or a final answer.";
}  // namespace

v1::Message FormatErrorMessage(const std::string& why) {
  v1::Message message;
  message.set_role("user");
  message.set_content(absl::StrCat(kFormatErrorLead, why, kFormatErrorTail));
  return message;
}

std::optional<std::string> FormatErrorReason(const v1::Message& message) {
  const std::string& text = message.content();
  if (message.role() != "user" || !absl::StartsWith(text, kFormatErrorLead) ||
      !absl::EndsWith(text, kFormatErrorTail)) {
    return std::nullopt;
  }
  const size_t lead = sizeof kFormatErrorLead - 1, tail = sizeof kFormatErrorTail - 1;
  if (text.size() < lead + tail) return std::nullopt;
  return text.substr(lead, text.size() - lead - tail);
}

}  // namespace loom::tasks
