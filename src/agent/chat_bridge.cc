#include "loom/agent/chat_bridge.h"

#include "absl/strings/str_cat.h"
#include "loom/chat/parser.h"

namespace loom::agent {
namespace {

absl::StatusOr<chat::Role> RoleOf(const std::string& role) {
  if (role == "system") return chat::Role::kSystem;
  if (role == "user") return chat::Role::kUser;
  if (role == "assistant") return chat::Role::kAssistant;
  if (role == "tool") return chat::Role::kTool;
  return absl::InvalidArgumentError(absl::StrCat("worker message: unknown role '", role, "'"));
}

}  // namespace

absl::StatusOr<chat::Message> ToChatMessage(const v1::Message& message) {
  absl::StatusOr<chat::Role> role = RoleOf(message.role());
  if (!role.ok()) return role.status();
  chat::Message out;
  out.role = *role;
  out.content = message.content();
  out.tool_call_id = message.tool_call_id();
  if (!message.reasoning_content().empty()) out.reasoning_content = message.reasoning_content();
  if (!message.tools_json().empty()) {
    chat::OrderedJson tools = chat::OrderedJson::parse(message.tools_json(), nullptr, false);
    if (tools.is_discarded() || !tools.is_array()) {
      return absl::InvalidArgumentError("worker message: tools_json is not a JSON array");
    }
    out.tools = std::move(tools);
  }
  for (const v1::ToolCall& call : message.tool_calls()) {
    out.tool_calls.push_back({call.id(), call.name(), call.arguments_json()});
  }
  return out;
}

v1::GenerateReply ReplyFromCompletion(std::string_view completion, chat::ThinkingMode mode,
                                      int turn) {
  v1::GenerateReply reply;
  reply.set_turn(turn);
  absl::StatusOr<chat::ParsedMessage> parsed = chat::ParseCompletion(completion, mode);
  if (!parsed.ok()) {
    reply.set_parse_error(std::string(parsed.status().message()));
    return reply;
  }
  v1::Message* assistant = reply.mutable_assistant();
  assistant->set_role("assistant");
  assistant->set_content(parsed->content);
  assistant->set_reasoning_content(parsed->reasoning_content);
  for (size_t i = 0; i < parsed->tool_calls.size(); ++i) {
    v1::ToolCall* call = assistant->add_tool_calls();
    call->set_id(absl::StrCat("call_", turn, "_", i));
    call->set_name(parsed->tool_calls[i].name);
    call->set_arguments_json(parsed->tool_calls[i].arguments);
  }
  return reply;
}

}  // namespace loom::agent
