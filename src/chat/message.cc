#include "loom/chat/message.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace loom::chat {
namespace {

constexpr const char* kTasks[] = {"action", "query", "authority", "domain", "title", "read_url"};

std::string Where(size_t index, const std::string& field) {
  return absl::StrCat("messages[", index, "].", field);
}

absl::Status Invalid(size_t index, const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(Where(index, field), ": ", problem));
}

absl::StatusOr<Role> ParseRole(const OrderedJson& m, size_t i) {
  if (!m.contains("role") || !m["role"].is_string()) return Invalid(i, "role", "must be a string");
  const std::string role = m["role"];
  if (role == "system") return Role::kSystem;
  if (role == "developer") return Role::kDeveloper;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "tool") return Role::kTool;
  if (role == "latest_reminder") return Role::kLatestReminder;
  return Invalid(i, "role", absl::StrCat("unknown role \"", role, "\""));
}

// A string field that may also be absent or null (then `fallback`).
absl::Status ReadString(const OrderedJson& m, size_t i, const char* key, std::string* out) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string())
    return Invalid(i, key, absl::StrCat("must be a string, got ", it->type_name()));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// Python truthiness of a JSON value.
bool IsTruthy(const OrderedJson& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  return !v.empty() && !(v.is_string() && v.get<std::string>().empty());
}

absl::StatusOr<ToolCall> ParseToolCall(const OrderedJson& call, size_t i, size_t k) {
  const std::string field = absl::StrCat("tool_calls[", k, "]");
  if (!call.is_object()) return Invalid(i, field, "must be an object");
  // OpenAI style nests name/arguments under "function"; accept them flat too.
  const OrderedJson& fn = call.contains("function") ? call["function"] : call;
  if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) {
    return Invalid(i, field + ".function.name", "must be a string");
  }
  ToolCall out;
  out.name = fn["name"];
  if (call.contains("id") && call["id"].is_string()) out.id = call["id"];
  auto args = fn.find("arguments");
  if (args == fn.end() || args->is_null()) {
    out.arguments = "{}";
  } else if (args->is_string()) {
    out.arguments = args->get<std::string>();
    if (!OrderedJson::accept(out.arguments)) {
      return Invalid(i, field + ".function.arguments", "is not valid JSON");
    }
  } else if (args->is_object()) {
    out.arguments = args->dump();
  } else {
    return Invalid(i, field + ".function.arguments", "must be a JSON string");
  }
  return out;
}

absl::Status ParseTask(const OrderedJson& m, size_t i, Message* out) {
  auto it = m.find("task");
  if (it == m.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    for (const char* task : kTasks) {
      if (*it == task) {
        out->task = task;
        return absl::OkStatus();
      }
    }
  }
  return Invalid(i, "task", "must be one of action, query, authority, domain, title, read_url");
}

absl::Status ParseOptionalFields(const OrderedJson& m, size_t i, Message* out) {
  if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
    std::string reasoning;
    absl::Status status = ReadString(m, i, "reasoning_content", &reasoning);
    if (!status.ok()) return status;
    out->reasoning_content = reasoning;
  }
  if (m.contains("tools") && !m["tools"].is_null()) {
    const OrderedJson& tools = m["tools"];
    if (!tools.is_array()) return Invalid(i, "tools", "must be an array");
    for (size_t k = 0; k < tools.size(); ++k) {
      if (!tools[k].is_object() || !tools[k].contains("function") ||
          !tools[k]["function"].is_object()) {
        return Invalid(i, absl::StrCat("tools[", k, "].function"), "must be an object");
      }
    }
    if (!tools.empty()) out->tools = tools;
  }
  // Like the reference's `if response_format:`, an empty value renders nothing.
  if (m.contains("response_format") && IsTruthy(m["response_format"])) {
    out->response_format = m["response_format"];
  }
  if (m.contains("wo_eos") && !m["wo_eos"].is_null()) {
    if (!m["wo_eos"].is_boolean()) return Invalid(i, "wo_eos", "must be a boolean");
    out->wo_eos = m["wo_eos"];
  }
  return ParseTask(m, i, out);
}

absl::Status ParseToolCalls(const OrderedJson& m, size_t i, Message* out) {
  auto it = m.find("tool_calls");
  if (it == m.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return Invalid(i, "tool_calls", "must be an array");
  for (size_t k = 0; k < it->size(); ++k) {
    absl::StatusOr<ToolCall> call = ParseToolCall((*it)[k], i, k);
    if (!call.ok()) return call.status();
    out->tool_calls.push_back(*std::move(call));
  }
  return absl::OkStatus();
}

absl::StatusOr<Message> ParseMessage(const OrderedJson& m, size_t i) {
  if (!m.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: must be an object"));
  }
  Message out;
  absl::StatusOr<Role> role = ParseRole(m, i);
  if (!role.ok()) return role.status();
  out.role = *role;
  absl::Status status = ReadString(m, i, "content", &out.content);
  if (status.ok()) status = ReadString(m, i, "tool_call_id", &out.tool_call_id);
  if (status.ok()) status = ParseOptionalFields(m, i, &out);
  if (status.ok()) status = ParseToolCalls(m, i, &out);
  if (!status.ok()) return status;
  return out;
}

// A tool result needs an earlier assistant message with tool calls; when
// both sides carry ids, its id must be one of that message's calls.
absl::Status CheckToolResult(const std::vector<Message>& messages, size_t i) {
  for (size_t j = i; j-- > 0;) {
    if (messages[j].role != Role::kAssistant) continue;
    if (messages[j].tool_calls.empty()) break;
    const std::string& id = messages[i].tool_call_id;
    bool ids_known = !id.empty(), matched = false;
    for (const ToolCall& call : messages[j].tool_calls) {
      ids_known = ids_known && !call.id.empty();
      matched = matched || call.id == id;
    }
    if (ids_known && !matched) {
      return Invalid(i, "tool_call_id",
                     absl::StrCat("\"", id, "\" matches no tool call of messages[", j, "]"));
    }
    return absl::OkStatus();
  }
  return Invalid(i, "role", "tool result without a preceding assistant tool call");
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kDeveloper:
      return "developer";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
    case Role::kLatestReminder:
      return "latest_reminder";
  }
  return "?";
}

absl::StatusOr<std::vector<Message>> MessagesFromJson(const OrderedJson& messages) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages: must be a JSON array");
  std::vector<Message> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    absl::StatusOr<Message> message = ParseMessage(messages[i], i);
    if (!message.ok()) return message.status();
    out.push_back(*std::move(message));
    if (out.back().role == Role::kTool) {
      absl::Status status = CheckToolResult(out, i);
      if (!status.ok()) return status;
    }
  }
  return out;
}

absl::StatusOr<std::vector<Message>> ConversationFromJson(const OrderedJson& doc) {
  if (doc.is_array()) return MessagesFromJson(doc);
  if (!doc.is_object() || !doc.contains("messages")) {
    return absl::InvalidArgumentError(
        "conversation: expected an array of messages or an object with \"messages\"");
  }
  OrderedJson messages = doc["messages"];
  if (doc.contains("tools") && messages.is_array() && !messages.empty() &&
      messages[0].is_object()) {
    messages[0]["tools"] = doc["tools"];
  }
  return MessagesFromJson(messages);
}

}  // namespace loom::chat
