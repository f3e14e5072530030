#include "loom/serve/anthropic_messages.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/serve/json_body.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

constexpr char kBillingHeader[] = "x-anthropic-billing-header:";

void JoinLine(std::string* text, const std::string& part) {
  if (!text->empty()) *text += "\n";
  *text += part;
}

// A string, or text blocks joined by newlines. `drop_billing`: leave out the
// client's billing-header block (system prompts only).
absl::StatusOr<std::string> BlocksText(const OrderedJson& value, const std::string& field,
                                       bool drop_billing = false) {
  if (!drop_billing) return TextParts(value, field, {"text"});
  return TextParts(value, field, {"text"},
                   [](const std::string& text) { return !absl::StartsWith(text, kBillingHeader); });
}

absl::Status ConvertUserTurn(const OrderedJson& content, const std::string& field,
                             ConvertedMessages* out) {
  if (content.is_string()) {
    out->Add({{"role", "user"}, {"content", content}}, field);
    return absl::OkStatus();
  }
  if (!content.is_array()) return FieldError(field + ".content", "must be a string or an array");
  std::string text;
  std::string text_field;
  auto flush = [&] {
    if (text_field.empty()) return;
    out->Add({{"role", "user"}, {"content", text}}, text_field);
    text.clear();
    text_field.clear();
  };
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string block = Indexed(field + ".content", j);
    auto type = TypeOf(content[j], block);
    if (!type.ok()) return type.status();
    if (*type == "text") {
      auto part = RequiredString(content[j], "text", block);
      if (!part.ok()) return part.status();
      JoinLine(&text, *part);
      if (text_field.empty()) text_field = block;
    } else if (*type == "tool_result") {
      flush();
      auto id = RequiredString(content[j], "tool_use_id", block);
      if (!id.ok()) return id.status();
      std::string result;
      if (content[j].contains("content") && !content[j]["content"].is_null()) {
        auto r = BlocksText(content[j]["content"], block + ".content");
        if (!r.ok()) return r.status();
        result = *std::move(r);
      }
      out->Add({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}}, block);
    } else {
      return FieldError(block + ".type", absl::StrCat("\"", *type, "\" is not supported"));
    }
  }
  flush();
  return absl::OkStatus();
}

absl::Status ConvertAssistantTurn(const OrderedJson& content, const std::string& field,
                                  ConvertedMessages* out) {
  OrderedJson message = {{"role", "assistant"}, {"content", ""}};
  if (content.is_string()) {
    message["content"] = content;
    out->Add(std::move(message), field);
    return absl::OkStatus();
  }
  if (!content.is_array()) return FieldError(field + ".content", "must be a string or an array");
  std::string reasoning, text;
  OrderedJson calls = OrderedJson::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string block = Indexed(field + ".content", j);
    auto type = TypeOf(content[j], block);
    if (!type.ok()) return type.status();
    if (*type == "thinking") {
      auto part = RequiredString(content[j], "thinking", block);
      if (!part.ok()) return part.status();
      reasoning += *part;
    } else if (*type == "redacted_thinking") {
      continue;  // another model's reasoning, unreadable here
    } else if (*type == "text") {
      auto part = RequiredString(content[j], "text", block);
      if (!part.ok()) return part.status();
      text += *part;
    } else if (*type == "tool_use") {
      auto id = RequiredString(content[j], "id", block);
      if (!id.ok()) return id.status();
      auto name = RequiredString(content[j], "name", block);
      if (!name.ok()) return name.status();
      if (!content[j].contains("input") || !content[j]["input"].is_object()) {
        return FieldError(block + ".input", "must be an object");
      }
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", content[j]["input"].dump()}}}});
    } else {
      return FieldError(block + ".type", absl::StrCat("\"", *type, "\" is not supported"));
    }
  }
  message["content"] = text;
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  out->Add(std::move(message), field);
  return absl::OkStatus();
}

absl::StatusOr<OrderedJson> AnthropicTools(const OrderedJson& tools) {
  if (!tools.is_array()) return FieldError("tools", "must be an array");
  OrderedJson out = OrderedJson::array();
  for (size_t k = 0; k < tools.size(); ++k) {
    const std::string field = Indexed("tools", k);
    const OrderedJson& tool = tools[k];
    if (!tool.is_object()) return FieldError(field, "must be an object");
    if (tool.contains("type") && !tool["type"].is_null() && tool["type"] != "custom") {
      return FieldError(field + ".type", "server tools are not supported; give input_schema");
    }
    auto name = RequiredString(tool, "name", field);
    if (!name.ok()) return name.status();
    if (!tool.contains("input_schema") || !tool["input_schema"].is_object()) {
      return FieldError(field + ".input_schema", "must be an object");
    }
    OrderedJson function = {{"name", *name}};
    if (tool.contains("description") && !tool["description"].is_null()) {
      auto description = RequiredString(tool, "description", field);
      if (!description.ok()) return description.status();
      function["description"] = *description;
    }
    function["parameters"] = tool["input_schema"];
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

absl::StatusOr<ConvertedMessages> AnthropicConversation(const OrderedJson& doc) {
  ConvertedMessages out;
  if (doc.contains("system") && !doc["system"].is_null()) {
    auto system = BlocksText(doc["system"], "system", /*drop_billing=*/true);
    if (!system.ok()) return system.status();
    if (!system->empty()) out.Add({{"role", "system"}, {"content", *system}}, "system");
  }
  if (!doc.contains("messages") || !doc["messages"].is_array() || doc["messages"].empty()) {
    return FieldError("messages", "must be a non-empty array");
  }
  const OrderedJson& messages = doc["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = Indexed("messages", i);
    const OrderedJson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return FieldError(field + ".role", "must be a string");
    }
    if (!m.contains("content")) return FieldError(field + ".content", "is missing");
    const std::string role = m["role"];
    absl::Status status;
    if (role == "user") {
      status = ConvertUserTurn(m["content"], field, &out);
    } else if (role == "assistant") {
      status = ConvertAssistantTurn(m["content"], field, &out);
    } else if (role == "system") {
      auto text = BlocksText(m["content"], field + ".content");
      if (!text.ok()) return text.status();
      out.Add({{"role", "system"}, {"content", *text}}, field);
    } else {
      status = FieldError(field + ".role", absl::StrCat("unknown role \"", role, "\""));
    }
    if (!status.ok()) return status;
  }
  if (out.empty()) return FieldError("messages", "has no message to render");
  if (doc.contains("tools") && !doc["tools"].is_null()) {
    auto tools = AnthropicTools(doc["tools"]);
    if (!tools.ok()) return tools.status();
    out.SetTools(*std::move(tools));
  }
  return out;
}

absl::Status ReadStopSequences(const OrderedJson& doc, std::vector<std::string>* out) {
  if (!doc.contains("stop_sequences") || doc["stop_sequences"].is_null()) {
    return absl::OkStatus();
  }
  const OrderedJson& stops = doc["stop_sequences"];
  if (!stops.is_array()) return FieldError("stop_sequences", "must be an array of strings");
  for (size_t k = 0; k < stops.size(); ++k) {
    if (!stops[k].is_string() || stops[k].get<std::string>().empty()) {
      return FieldError(Indexed("stop_sequences", k), "must be a non-empty string");
    }
    out->push_back(stops[k]);
  }
  return absl::OkStatus();
}

absl::Status ReadThinking(const OrderedJson& doc, MessagesRequest* out) {
  if (doc.contains("thinking") && !doc["thinking"].is_null()) {
    const OrderedJson& thinking = doc["thinking"];
    if (!thinking.is_object()) return FieldError("thinking", "must be an object");
    std::string type = "enabled";
    if (absl::Status s = ReadString(thinking, "type", &type); !s.ok()) {
      return FieldError("thinking.type", "must be a string");
    }
    if (type == "disabled") {
      out->turn.thinking = chat::ThinkingMode::kChat;
    } else if (type != "enabled" && type != "adaptive") {
      return FieldError("thinking.type", "must be \"enabled\", \"adaptive\" or \"disabled\"");
    }
    std::string display;
    if (absl::Status s = ReadString(thinking, "display", &display); !s.ok()) {
      return FieldError("thinking.display", "must be a string");
    }
    out->omit_thinking = display == "omitted";
  }
  if (doc.contains("output_config") && !doc["output_config"].is_null()) {
    const OrderedJson& config = doc["output_config"];
    if (!config.is_object()) return FieldError("output_config", "must be an object");
    if (absl::Status s = ReadString(config, "effort", &out->turn.effort); !s.ok()) {
      return FieldError("output_config.effort", "must be a string");
    }
  }
  return absl::OkStatus();
}

// Fields loom does not implement and that would change what is generated.
absl::Status RefuseUnsupportedMessages(const OrderedJson& doc) {
  if (doc.contains("top_k") && !doc["top_k"].is_null()) {
    return FieldError("top_k", "is not supported");
  }
  if (doc.contains("tool_choice") && !doc["tool_choice"].is_null()) {
    const OrderedJson& choice = doc["tool_choice"];
    if (!choice.is_object() || choice.value("type", "") != "auto") {
      return FieldError("tool_choice", "only {\"type\": \"auto\"} is supported");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MessagesRequest> ParseMessagesRequest(std::string_view body, bool count_tokens) {
  auto doc = ParseJsonBody(body);
  if (!doc.ok()) return doc.status();
  MessagesRequest out;
  out.turn.effort_field = "output_config.effort";
  absl::Status status = ReadString(*doc, "model", &out.model);
  if (status.ok()) status = RefuseUnsupportedMessages(*doc);
  if (status.ok()) status = ReadPositiveInt(*doc, "max_tokens", &out.turn.max_tokens);
  if (status.ok() && !count_tokens && out.turn.max_tokens == 0) {
    status = FieldError("max_tokens", "is required");
  }
  if (status.ok()) status = ReadStopSequences(*doc, &out.turn.stop);
  if (status.ok()) {
    status = ReadSampling(*doc, 1, &out.turn.temperature, &out.turn.top_p);
  }
  if (status.ok()) status = ReadBool(*doc, "stream", &out.turn.stream);
  if (status.ok()) status = ReadThinking(*doc, &out);
  if (!status.ok()) return status;
  auto converted = AnthropicConversation(*doc);
  if (!converted.ok()) return converted.status();
  auto messages = converted->Parse();
  if (!messages.ok()) return messages.status();
  out.turn.messages = *std::move(messages);
  PlaceLateSystemMessages(&out.turn.messages);
  return out;
}

std::string MessagesError(const ApiError& error) {
  const char* type = error.status == 401   ? "authentication_error"
                     : error.status == 404 ? "not_found_error"
                     : error.status == 413 ? "request_too_large"
                     : error.status >= 500 ? "api_error"
                                           : "invalid_request_error";
  return DumpJson({{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}});
}

namespace {

OrderedJson ToolInput(const chat::ToolCall& call) {
  try {
    return OrderedJson::parse(call.arguments);  // the parser checked it is a JSON object
  } catch (const OrderedJson::exception&) {
    return OrderedJson::object();
  }
}

OrderedJson MessagesUsage(int64_t input_tokens, int64_t output_tokens) {
  return {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}};
}

OrderedJson StopSequenceJson(const MessagesTurn& turn) {
  return turn.stop_reason == "stop_sequence" ? OrderedJson(turn.stop_sequence)
                                             : OrderedJson(nullptr);
}

std::string MessagesEvent(const char* name, OrderedJson data) {
  return absl::StrCat("event: ", name, "\ndata: ", DumpJson(data), "\n\n");
}

}  // namespace

OrderedJson MessageJson(const MessagesTurn& turn) {
  OrderedJson content = OrderedJson::array();
  if (!turn.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", turn.reasoning}, {"signature", turn.id}});
  }
  if (!turn.content.empty()) content.push_back({{"type", "text"}, {"text", turn.content}});
  for (const chat::ToolCall& call : turn.tool_calls) {
    content.push_back(
        {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", ToolInput(call)}});
  }
  return {{"id", turn.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", turn.model},
          {"content", std::move(content)},
          {"stop_reason", turn.stop_reason},
          {"stop_sequence", StopSequenceJson(turn)},
          {"usage", MessagesUsage(turn.input_tokens, turn.output_tokens)}};
}

std::string MessagesStream::Start(int64_t input_tokens) {
  started_ = true;
  OrderedJson message = {{"id", id_},
                         {"type", "message"},
                         {"role", "assistant"},
                         {"model", model_},
                         {"content", OrderedJson::array()},
                         {"stop_reason", nullptr},
                         {"stop_sequence", nullptr},
                         {"usage", MessagesUsage(input_tokens, 0)}};
  return MessagesEvent("message_start",
                       {{"type", "message_start"}, {"message", std::move(message)}});
}

std::string MessagesStream::Open(Block block) {
  open_ = block;
  OrderedJson start = block == Block::kThinking
                          ? OrderedJson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                          : OrderedJson{{"type", "text"}, {"text", ""}};
  return MessagesEvent(
      "content_block_start",
      {{"type", "content_block_start"}, {"index", index_}, {"content_block", start}});
}

std::string MessagesStream::Close() {
  if (open_ == Block::kNone) return "";
  std::string events;
  if (open_ == Block::kThinking) {
    events = MessagesEvent("content_block_delta",
                           {{"type", "content_block_delta"},
                            {"index", index_},
                            {"delta", {{"type", "signature_delta"}, {"signature", id_}}}});
  }
  open_ = Block::kNone;
  return events +
         MessagesEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
}

std::string MessagesStream::Delta(const CompletionDelta& delta, int64_t input_tokens) {
  std::string events = started_ ? "" : Start(input_tokens);
  auto write = [&](Block block, const char* type, const char* key, const std::string& text) {
    if (open_ != block) {
      events += Close();  // before Open, which changes what is open
      events += Open(block);
    }
    events += MessagesEvent("content_block_delta", {{"type", "content_block_delta"},
                                                    {"index", index_},
                                                    {"delta", {{"type", type}, {key, text}}}});
  };
  if (!delta.reasoning.empty() && !omit_thinking_) {
    write(Block::kThinking, "thinking_delta", "thinking", delta.reasoning);
  }
  if (!delta.content.empty()) write(Block::kText, "text_delta", "text", delta.content);
  return events;
}

std::string MessagesStream::Finish(const MessagesTurn& turn) {
  std::string events = started_ ? "" : Start(turn.input_tokens);
  events += Close();
  for (const chat::ToolCall& call : turn.tool_calls) {
    OrderedJson block = {{"type", "tool_use"},
                         {"id", call.id},
                         {"name", call.name},
                         {"input", OrderedJson::object()}};
    events += MessagesEvent(
        "content_block_start",
        {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
    events += MessagesEvent(
        "content_block_delta",
        {{"type", "content_block_delta"},
         {"index", index_},
         {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
    events +=
        MessagesEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }
  events += MessagesEvent(
      "message_delta",
      {{"type", "message_delta"},
       {"delta", {{"stop_reason", turn.stop_reason}, {"stop_sequence", StopSequenceJson(turn)}}},
       {"usage", MessagesUsage(turn.input_tokens, turn.output_tokens)}});
  return events + MessagesEvent("message_stop", {{"type", "message_stop"}});
}

std::string MessagesStream::Error(const ApiError& error) {
  return absl::StrCat("event: error\ndata: ", MessagesError(error), "\n\n");
}

}  // namespace loom::serve
