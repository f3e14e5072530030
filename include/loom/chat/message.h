#pragma once
// OpenAI-style chat messages as the DeepSeek-V4 encoder reads them
// (shared/dsv4-format.md), and their validation from JSON.
//
// MessagesFromJson checks every message once and returns plain structs; a
// malformed message (unknown role, non-string content, bad tool call, bad
// arguments JSON, tool result without a matching call) is an
// INVALID_ARGUMENT error naming `messages[i].field`. JSON values that the
// prompt shows (tools, response_format, arguments) keep their key order.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::chat {

using OrderedJson = nlohmann::ordered_json;

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool, kLatestReminder };

// The role's name as written in JSON ("system", "latest_reminder", ...).
const char* RoleName(Role role);

struct ToolCall {
  std::string id;  // may be empty; never rendered
  std::string name;
  std::string arguments;  // JSON text, as in OpenAI messages
};

// A part of a user message built from tool results (see the merge rule).
struct ContentBlock {
  bool is_tool_result = false;
  std::string text;         // the text, or the tool result's content
  std::string tool_use_id;  // tool results only
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  std::optional<std::string> reasoning_content;
  std::optional<OrderedJson> tools;            // OpenAI tool list
  std::optional<OrderedJson> response_format;  // any JSON value
  std::vector<ToolCall> tool_calls;
  std::string tool_call_id;         // tool messages
  std::optional<std::string> task;  // action, query, authority, domain, title, read_url
  bool wo_eos = false;
  // Set only on user messages made by merging tool results; when non-empty
  // it replaces `content` in the prompt.
  std::vector<ContentBlock> blocks;
};

// Validates a JSON array of messages.
absl::StatusOr<std::vector<Message>> MessagesFromJson(const OrderedJson& messages);

// Reads a conversation file's JSON: either an array of messages, or an
// object {"messages": [...], "tools": [...]} whose tools go on the first
// message.
absl::StatusOr<std::vector<Message>> ConversationFromJson(const OrderedJson& doc);

}  // namespace loom::chat
