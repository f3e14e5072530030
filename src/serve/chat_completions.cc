#include "loom/serve/chat_completions.h"

#include "absl/strings/str_cat.h"
#include "loom/serve/json_body.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

absl::StatusOr<OrderedJson> NormalizedMessages(const OrderedJson& doc) {
  if (!doc.contains("messages") || !doc["messages"].is_array() || doc["messages"].empty()) {
    return FieldError("messages", "must be a non-empty array");
  }
  OrderedJson messages = doc["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    OrderedJson& m = messages[i];
    if (!m.is_object() || !m.contains("content")) continue;  // MessagesFromJson names it
    if (!m["content"].is_array())
      continue;  // a string, null or a wrong type MessagesFromJson names
    auto content = TextParts(m["content"], absl::StrCat("messages[", i, "].content"), {"text"});
    if (!content.ok()) return content.status();
    m["content"] = *std::move(content);
  }
  if (doc.contains("tools") && !doc["tools"].is_null()) {
    const OrderedJson& tools = doc["tools"];
    if (!tools.is_array()) return FieldError("tools", "must be an array");
    for (size_t k = 0; k < tools.size(); ++k) {
      const std::string field = absl::StrCat("tools[", k, "]");
      if (!tools[k].is_object() || tools[k].value("type", "") != "function") {
        return FieldError(field + ".type", "must be \"function\"");
      }
      const OrderedJson* fn = tools[k].contains("function") ? &tools[k]["function"] : nullptr;
      if (fn == nullptr || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string()) {
        return FieldError(field + ".function.name", "must be a string");
      }
    }
    if (!tools.empty() && messages[0].is_object()) messages[0]["tools"] = tools;
  }
  if (doc.contains("response_format") && doc["response_format"].is_object()) {
    const OrderedJson& format = doc["response_format"];
    const std::string type = format.value("type", "text");
    if (type == "json_schema" && messages[0].is_object()) {
      messages[0]["response_format"] = format.value("json_schema", OrderedJson::object());
    } else if (type == "json_object" && messages[0].is_object()) {
      messages[0]["response_format"] = OrderedJson{{"type", "object"}};
    } else if (type != "text") {
      return FieldError("response_format.type", "\"" + type + "\" is not supported");
    }
  }
  return messages;
}

absl::Status ReadMaxTokens(const OrderedJson& doc, int64_t* out) {
  absl::Status status = ReadPositiveInt(doc, "max_tokens", out);
  // max_completion_tokens, read last, wins.
  if (status.ok()) status = ReadPositiveInt(doc, "max_completion_tokens", out);
  return status;
}

absl::Status ReadStop(const OrderedJson& doc, std::vector<std::string>* out) {
  if (!doc.contains("stop") || doc["stop"].is_null()) return absl::OkStatus();
  const OrderedJson& stop = doc["stop"];
  if (stop.is_string()) {
    if (!stop.get<std::string>().empty()) out->push_back(stop);
    return absl::OkStatus();
  }
  if (!stop.is_array() || stop.size() > 4) {
    return FieldError("stop", "must be a string or an array of at most 4 strings");
  }
  for (size_t k = 0; k < stop.size(); ++k) {
    if (!stop[k].is_string() || stop[k].get<std::string>().empty()) {
      return FieldError(absl::StrCat("stop[", k, "]"), "must be a non-empty string");
    }
    out->push_back(stop[k]);
  }
  return absl::OkStatus();
}

// Fields loom does not implement and that would change what is generated.
absl::Status RefuseUnsupported(const OrderedJson& doc) {
  if (doc.contains("n") && !doc["n"].is_null() && doc["n"] != 1) {
    return FieldError("n", "only 1 is supported");
  }
  if (doc.contains("tool_choice") && !doc["tool_choice"].is_null() &&
      doc["tool_choice"] != "auto") {
    return FieldError("tool_choice", "only \"auto\" is supported");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (!doc.contains(key) || doc[key].is_null()) continue;
    if (!doc[key].is_number()) return FieldError(key, "must be a number");
    if (doc[key].get<double>() != 0) return FieldError(key, "only 0 is supported");
  }
  if (doc.contains("logit_bias") && !doc["logit_bias"].is_null() &&
      !(doc["logit_bias"].is_object() && doc["logit_bias"].empty())) {
    return FieldError("logit_bias", "is not supported");
  }
  return absl::OkStatus();
}

absl::Status ReadStreamFields(const OrderedJson& doc, ChatCompletionsRequest* out) {
  if (absl::Status status = ReadBool(doc, "stream", &out->turn.stream); !status.ok()) {
    return status;
  }
  if (doc.contains("stream_options") && !doc["stream_options"].is_null()) {
    const OrderedJson& options = doc["stream_options"];
    if (!options.is_object()) return FieldError("stream_options", "must be an object");
    if (options.contains("include_usage") && !options["include_usage"].is_boolean()) {
      return FieldError("stream_options.include_usage", "must be a boolean");
    }
    out->include_usage = options.value("include_usage", false);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatCompletionsRequest> ParseChatCompletionsRequest(std::string_view body) {
  auto doc = ParseJsonBody(body);
  if (!doc.ok()) return doc.status();
  ChatCompletionsRequest out;
  out.turn.effort_field = "reasoning_effort";
  absl::Status status = ReadString(*doc, "model", &out.model);
  if (status.ok()) status = ReadString(*doc, "reasoning_effort", &out.turn.effort);
  if (status.ok()) status = RefuseUnsupported(*doc);
  if (status.ok()) status = ReadMaxTokens(*doc, &out.turn.max_tokens);
  if (status.ok()) status = ReadStop(*doc, &out.turn.stop);
  if (status.ok()) {
    status = ReadSampling(*doc, 2, &out.turn.temperature, &out.turn.top_p);
  }
  if (status.ok()) status = ReadStreamFields(*doc, &out);
  if (!status.ok()) return status;
  auto messages = NormalizedMessages(*doc);
  if (!messages.ok()) return messages.status();
  auto parsed = chat::MessagesFromJson(*messages);
  if (!parsed.ok()) return parsed.status();
  out.turn.messages = *std::move(parsed);
  PlaceLateSystemMessages(&out.turn.messages);
  return out;
}

std::string ChatCompletionsError(const ApiError& error) {
  OrderedJson e = {{"message", error.message},
                   {"type", error.status == 401   ? "authentication_error"
                            : error.status >= 500 ? "server_error"
                                                  : "invalid_request_error"},
                   {"param", nullptr},
                   {"code", error.code.empty() ? OrderedJson(nullptr) : OrderedJson(error.code)}};
  const size_t colon = error.message.find(": ");
  if (colon != std::string::npos && error.message.find(' ') > colon) {
    e["param"] = error.message.substr(0, colon);  // the message starts with the field
  }
  return DumpJson({{"error", e}});
}

namespace {

OrderedJson ToolCallsJson(const std::vector<chat::ToolCall>& calls, bool with_index) {
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    OrderedJson call;
    if (with_index) call["index"] = i;
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

OrderedJson UsageJson(const TurnUsage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

std::string Event(const OrderedJson& data) {
  return absl::StrCat("data: ", DumpJson(data), "\n\n");
}

}  // namespace

OrderedJson ChatCompletionJson(const ChatCompletionsId& id, const std::string& reasoning,
                               const std::string& content,
                               const std::vector<chat::ToolCall>& tool_calls,
                               const std::string& finish_reason, const TurnUsage& usage) {
  OrderedJson message = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!tool_calls.empty()) message["tool_calls"] = ToolCallsJson(tool_calls, false);
  OrderedJson choice = {{"index", 0}, {"message", message}, {"finish_reason", finish_reason}};
  return {{"id", id.id},
          {"object", "chat.completion"},
          {"created", id.created},
          {"model", id.model},
          {"choices", OrderedJson::array({choice})},
          {"usage", UsageJson(usage)}};
}

std::string ChatChunkEvent(const ChatCompletionsId& id, const OrderedJson& delta,
                           const OrderedJson& finish_reason) {
  OrderedJson choice = {{"index", 0}, {"delta", delta}, {"finish_reason", finish_reason}};
  return Event({{"id", id.id},
                {"object", "chat.completion.chunk"},
                {"created", id.created},
                {"model", id.model},
                {"choices", OrderedJson::array({choice})}});
}

std::string ChatUsageEvent(const ChatCompletionsId& id, const TurnUsage& usage) {
  return Event({{"id", id.id},
                {"object", "chat.completion.chunk"},
                {"created", id.created},
                {"model", id.model},
                {"choices", OrderedJson::array()},
                {"usage", UsageJson(usage)}});
}

OrderedJson ChatDelta(const CompletionDelta& delta) {
  OrderedJson out = OrderedJson::object();
  if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty()) out["content"] = delta.content;
  return out;
}

OrderedJson ChatToolCallsDelta(const std::vector<chat::ToolCall>& tool_calls) {
  return {{"tool_calls", ToolCallsJson(tool_calls, true)}};
}

}  // namespace loom::serve
