#include "chat/render.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "chat/json_text.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::chat {
namespace {

namespace t = tokenizer::dsv4;

constexpr char kMaxEffortPrefix[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr char kResponseFormatIntro[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

std::string ToolsBlock(const OrderedJson& tools) {
  const std::string dsml(t::kDsml), open(t::kThinkOpen), close(t::kThinkClose);
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) schemas += "\n";
    schemas += PromptJson(tools[i]["function"]);
  }
  return absl::StrCat(
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"<",
      dsml, "tool_calls>\" block like the following:\n\n<", dsml, "tool_calls>\n<", dsml,
      "invoke name=\"$TOOL_NAME\">\n<", dsml,
      "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</", dsml,
      "parameter>\n...\n</", dsml, "invoke>\n<", dsml, "invoke name=\"$TOOL_NAME2\">\n...\n</",
      dsml, "invoke>\n</", dsml,
      "tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For "
      "all other types (numbers, booleans, arrays, objects), pass the value in JSON format and "
      "set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by ",
      open, "), you MUST output your complete reasoning inside ", open, "...", close,
      " BEFORE any tool calls or final response.\n\nOtherwise, output directly after ", close,
      " with tool calls or final response.\n\n### Available Tool Schemas\n\n", schemas,
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n");
}

// "\n\n" + tools block and/or response-format block, for system and developer.
void RenderExtras(const Message& m, PromptBuilder* out) {
  if (m.tools) out->Text("\n\n" + ToolsBlock(*m.tools));
  if (m.response_format) {
    out->Text(absl::StrCat("\n\n", kResponseFormatIntro, PromptJson(*m.response_format)));
  }
}

void DsmlTag(std::string_view before, std::string_view after, PromptBuilder* out) {
  out->Text(before);
  out->Special(t::kDsml);
  out->Text(after);
}

void RenderToolCalls(const std::vector<ToolCall>& calls, PromptBuilder* out) {
  DsmlTag("\n\n<", "tool_calls>\n", out);
  for (size_t i = 0; i < calls.size(); ++i) {
    DsmlTag(i > 0 ? "\n<" : "<", absl::StrCat("invoke name=\"", calls[i].name, "\">\n"), out);
    OrderedJson args = OrderedJson::parse(calls[i].arguments, nullptr, false);
    if (!args.is_object()) args = OrderedJson{{"arguments", calls[i].arguments}};
    bool first = true;
    for (auto it = args.begin(); it != args.end(); ++it) {
      const bool is_string = it.value().is_string();
      const std::string value = is_string ? it.value().get<std::string>() : PromptJson(it.value());
      DsmlTag(first ? "<" : "\n<",
              absl::StrCat("parameter name=\"", it.key(), "\" string=\"",
                           is_string ? "true" : "false", "\">", value, "</"),
              out);
      DsmlTag("", "parameter>", out);
      first = false;
    }
    DsmlTag("\n</", "invoke>", out);
  }
  DsmlTag("\n</", "tool_calls>", out);
}

void RenderUser(const Message& m, PromptBuilder* out) {
  out->Special(t::kUser);
  if (m.blocks.empty()) {
    out->Text(m.content);
    return;
  }
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    if (i > 0) out->Text("\n\n");
    const ContentBlock& b = m.blocks[i];
    out->Text(b.is_tool_result ? absl::StrCat("<tool_result>", b.text, "</tool_result>") : b.text);
  }
}

void RenderAssistant(const std::vector<Message>& messages, size_t index, const RenderContext& c,
                     PromptBuilder* out) {
  const Message& m = messages[index];
  const bool previous_has_task = index > 0 && messages[index - 1].task.has_value();
  if (c.thinking && !previous_has_task &&
      (!c.drop_thinking || static_cast<int>(index) > c.last_user)) {
    out->Text(m.reasoning_content.value_or(""));
    out->Special(t::kThinkClose);
  }
  out->Text(m.content);
  if (!m.tool_calls.empty()) RenderToolCalls(m.tool_calls, out);
  if (!m.wo_eos) out->Special(t::kEos);
}

std::string_view TaskToken(const std::string& task) {
  if (task == "action") return t::kAction;
  if (task == "query") return t::kQuery;
  if (task == "authority") return t::kAuthority;
  if (task == "domain") return t::kDomain;
  if (task == "title") return t::kTitle;
  return t::kReadUrl;
}

// Rule 6: what follows a message when the next one is not a user-side turn.
void RenderTransition(const std::vector<Message>& messages, size_t index, const RenderContext& c,
                      PromptBuilder* out) {
  if (index + 1 < messages.size()) {
    const Role next = messages[index + 1].role;
    if (next != Role::kAssistant && next != Role::kLatestReminder) return;
  }
  const Message& m = messages[index];
  if (m.task) {
    if (*m.task == "action") {
      out->Special(t::kAssistant);
      out->Special(c.thinking ? t::kThinkOpen : t::kThinkClose);
    }
    out->Special(TaskToken(*m.task));
    return;
  }
  if (m.role != Role::kUser && m.role != Role::kDeveloper) return;
  out->Special(t::kAssistant);
  const bool open = c.thinking && (!c.drop_thinking || static_cast<int>(index) >= c.last_user);
  out->Special(open ? t::kThinkOpen : t::kThinkClose);
}

void RenderEffort(const ReasoningEffort& effort, PromptBuilder* out) {
  if (effort.kind == ReasoningEffort::Kind::kMax) out->Text(kMaxEffortPrefix);
  if (effort.kind == ReasoningEffort::Kind::kNumeric) {
    out->Text(std::string(t::kEffortLineStart) + std::to_string(effort.b) +
              std::string(t::kEffortLineEnd));
  }
}

}  // namespace

void RenderMessage(const std::vector<Message>& messages, size_t index, const RenderContext& context,
                   PromptBuilder* out) {
  const Message& m = messages[index];
  if (index == 0 && context.thinking) RenderEffort(context.effort, out);
  switch (m.role) {
    case Role::kSystem:
      out->Text(m.content);
      RenderExtras(m, out);
      break;
    case Role::kDeveloper:
      out->Special(t::kUser);
      out->Text(m.content);
      RenderExtras(m, out);
      break;
    case Role::kUser:
    case Role::kTool:  // merged into user messages before rendering
      RenderUser(m, out);
      break;
    case Role::kLatestReminder:
      out->Special(t::kLatestReminder);
      out->Text(m.content);
      break;
    case Role::kAssistant:
      RenderAssistant(messages, index, context, out);
      break;
  }
  RenderTransition(messages, index, context, out);
}

}  // namespace loom::chat
