// Tool calls checked against the tools a request offered: the tool must
// exist and its arguments satisfy its JSON schema, with an error naming the
// call and the argument at fault.

#include "loom/serve/tool_schema.h"

#include <gtest/gtest.h>

namespace loom::serve {
namespace {

using chat::OrderedJson;

// Tools shaped like Claude Code's and Codex's: nested objects and arrays,
// enums, bounds, unions, and additionalProperties: false.
const OrderedJson& Tools() {
  static const OrderedJson tools = OrderedJson::parse(R"([
    {"type": "function", "function": {"name": "Bash", "parameters": {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "type": "object",
      "properties": {
        "command": {"type": "string", "minLength": 1},
        "timeout": {"type": "number", "maximum": 600000},
        "run_in_background": {"type": "boolean"}
      },
      "required": ["command"],
      "additionalProperties": false}}},
    {"type": "function", "function": {"name": "TodoWrite", "parameters": {
      "type": "object",
      "properties": {"todos": {"type": "array", "minItems": 1, "items": {
        "type": "object",
        "properties": {
          "content": {"type": "string"},
          "status": {"enum": ["pending", "in_progress", "completed"]},
          "priority": {"type": "integer", "minimum": 1}
        },
        "required": ["content", "status"]}}},
      "required": ["todos"]}}},
    {"type": "function", "function": {"name": "Read", "parameters": {
      "type": "object",
      "properties": {
        "path": {"type": "string"},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "mode": {"oneOf": [{"const": "text"}, {"const": "bytes"}]},
        "label": {"type": ["string", "null"], "maxLength": 3}
      }}}},
    {"type": "function", "function": {"name": "Free"}}
  ])");
  return tools;
}

absl::Status CheckCall(const std::string& name, const std::string& arguments) {
  return CheckToolCall({"call_0", name, arguments}, Tools());
}

TEST(ToolSchemaTest, CallsThatFitTheirSchemasPass) {
  for (const auto& [name, arguments] : std::vector<std::pair<std::string, std::string>>{
           {"Bash", R"({"command": "ls -la"})"},
           {"Bash", R"({"command": "sleep 1", "timeout": 5000, "run_in_background": true})"},
           {"TodoWrite", R"({"todos": [{"content": "a", "status": "pending", "priority": 2}]})"},
           {"TodoWrite",
            R"({"todos": [{"content": "b", "status": "completed", "priority": 2.0}]})"},
           {"Read", R"({"path": "a.txt", "limit": null, "mode": "text", "label": "äöü"})"},
           {"Read", R"({"path": "a.txt", "limit": 10, "label": null, "other": 1})"},
           {"Free", R"({"anything": [1, 2]})"},
       }) {
    EXPECT_TRUE(CheckCall(name, arguments).ok())
        << name << " " << arguments << ": " << CheckCall(name, arguments);
  }
}

TEST(ToolSchemaTest, EveryViolationIsRefusedNamingTheArgument) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"Nope", "{}", "Nope: no tool of that name was offered"},
      {"Bash", "{}", "Bash: arguments.command: is required"},
      {"Bash", R"({"command": 3})", "Bash: arguments.command: must be string"},
      {"Bash", R"({"command": ""})", "Bash: arguments.command: must be at least 1 characters"},
      {"Bash", R"({"command": "ls", "cwd": "/"})", "Bash: arguments.cwd: is not a known argument"},
      {"Bash", R"({"command": "ls", "timeout": 700000})",
       "Bash: arguments.timeout: must be at most 600000"},
      {"Bash", R"({"command": "ls", "run_in_background": "yes"})",
       "Bash: arguments.run_in_background: must be boolean"},
      {"Bash", "[1]", "Bash: arguments: must be an object"},
      {"Bash", "{", "Bash: arguments: not JSON"},
      {"TodoWrite", R"({"todos": []})", "TodoWrite: arguments.todos: must have at least 1 items"},
      {"TodoWrite", R"({"todos": {"content": "a"}})", "TodoWrite: arguments.todos: must be array"},
      {"TodoWrite", R"({"todos": [{"content": "a", "status": "done"}]})",
       "TodoWrite: arguments.todos[0].status: must be one of"},
      {"TodoWrite", R"({"todos": [{"status": "pending"}]})",
       "TodoWrite: arguments.todos[0].content: is required"},
      {"TodoWrite", R"({"todos": [{"content": "a", "status": "pending", "priority": 1.5}]})",
       "TodoWrite: arguments.todos[0].priority: must be integer"},
      {"TodoWrite", R"({"todos": [{"content": "a", "status": "pending", "priority": 0}]})",
       "TodoWrite: arguments.todos[0].priority: must be at least 1"},
      {"Read", R"({"limit": "ten"})", "Read: arguments.limit: matches none of its anyOf schemas"},
      {"Read", R"({"mode": "lines"})", "Read: arguments.mode: must match exactly one"},
      {"Read", R"({"label": "long"})", "Read: arguments.label: must be at most 3 characters"},
      {"Read", R"({"label": 5})", "Read: arguments.label: must be string or null"},
  };
  for (const auto& [name, arguments, expected] : cases) {
    absl::Status status = CheckCall(name, arguments);
    ASSERT_FALSE(status.ok()) << name << " " << arguments;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()).rfind(expected, 0), 0u)
        << name << " " << arguments << " -> " << status.message();
  }
}

TEST(ToolSchemaTest, NoToolsOfferedMeansNoCallFits) {
  EXPECT_FALSE(CheckToolCall({"", "Bash", "{}"}, std::nullopt).ok());
  const std::vector<chat::ToolCall> calls = {{"", "Bash", R"({"command": "ls"})"},
                                             {"", "Bash", R"({"command": 1})"}};
  absl::Status both = CheckToolCalls(calls, Tools());
  EXPECT_EQ(both.message(), "Bash: arguments.command: must be string");
  EXPECT_TRUE(CheckToolCalls({calls[0]}, Tools()).ok());
}

}  // namespace
}  // namespace loom::serve
