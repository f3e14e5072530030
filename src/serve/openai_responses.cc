#include "loom/serve/openai_responses.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "loom/serve/json_body.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

// A string, or text parts joined by newlines.
absl::StatusOr<std::string> PartsText(const OrderedJson& value, const std::string& field) {
  return TextParts(value, field,
                   {"input_text", "output_text", "text", "reasoning_text", "summary_text"});
}

// Input items in order. The items of one assistant turn (reasoning, its
// message, its function calls) gather into one assistant message until an
// item of another role ends it.
class InputConverter {
 public:
  absl::Status Item(const OrderedJson& item, const std::string& field) {
    if (!item.is_object()) return FieldError(field, "must be an object");
    std::string type = "message";  // an item with a role and no type is a message
    if (item.contains("type") && !item["type"].is_null()) {
      auto t = TypeOf(item, field);
      if (!t.ok()) return t.status();
      type = *t;
    }
    if (type == "message") return Message(item, field);
    if (type == "reasoning") return Reasoning(item, field);
    if (type == "function_call") return FunctionCall(item, field);
    if (type == "function_call_output") {
      Flush();
      auto call = RequiredString(item, "call_id", field);
      if (!call.ok()) return call.status();
      if (!item.contains("output")) return FieldError(field + ".output", "is missing");
      auto output = PartsText(item["output"], field + ".output");
      if (!output.ok()) return output.status();
      out_.Add({{"role", "tool"}, {"tool_call_id", *call}, {"content", *output}}, field);
      return absl::OkStatus();
    }
    return FieldError(field + ".type", absl::StrCat("\"", type, "\" is not supported"));
  }

  ConvertedMessages Done() {
    Flush();
    return std::move(out_);
  }
  ConvertedMessages& out() { return out_; }

 private:
  absl::Status Message(const OrderedJson& item, const std::string& field) {
    auto role = RequiredString(item, "role", field);
    if (!role.ok()) return role.status();
    if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer") {
      return FieldError(field + ".role", absl::StrCat("unknown role \"", *role, "\""));
    }
    if (!item.contains("content")) return FieldError(field + ".content", "is missing");
    auto text = PartsText(item["content"], field + ".content");
    if (!text.ok()) return text.status();
    if (*role != "assistant") {
      Flush();
      out_.Add({{"role", *role}, {"content", *text}}, field);
      return absl::OkStatus();
    }
    if (assistant_ && (has_content_ || has_calls_)) Flush();
    Assistant(field)["content"] = *text;
    has_content_ = true;
    return absl::OkStatus();
  }

  absl::Status Reasoning(const OrderedJson& item, const std::string& field) {
    std::string text;
    for (const char* key : {"content", "summary"}) {
      if (!text.empty() || !item.contains(key) || item[key].is_null()) continue;
      auto part = PartsText(item[key], absl::StrCat(field, ".", key));
      if (!part.ok()) return part.status();
      text = *std::move(part);
    }
    if (assistant_ && (has_content_ || has_calls_)) Flush();
    if (!text.empty()) Assistant(field)["reasoning_content"] = text;
    return absl::OkStatus();
  }

  absl::Status FunctionCall(const OrderedJson& item, const std::string& field) {
    auto call = RequiredString(item, "call_id", field);
    if (!call.ok()) return call.status();
    auto name = RequiredString(item, "name", field);
    if (!name.ok()) return name.status();
    auto arguments = RequiredString(item, "arguments", field);
    if (!arguments.ok()) return arguments.status();
    OrderedJson& message = Assistant(field);
    if (!message.contains("tool_calls")) message["tool_calls"] = OrderedJson::array();
    message["tool_calls"].push_back({{"id", *call},
                                     {"type", "function"},
                                     {"function", {{"name", *name}, {"arguments", *arguments}}}});
    has_calls_ = true;
    return absl::OkStatus();
  }

  OrderedJson& Assistant(const std::string& field) {
    if (!assistant_) {
      out_.Add({{"role", "assistant"}, {"content", ""}}, field);
      assistant_ = true;
    }
    return out_.back();
  }

  void Flush() { assistant_ = has_content_ = has_calls_ = false; }

  ConvertedMessages out_;
  bool assistant_ = false;  // out_.back() is an assistant turn still gathering items
  bool has_content_ = false;
  bool has_calls_ = false;
};

absl::StatusOr<OrderedJson> ResponsesTools(const OrderedJson& tools) {
  if (!tools.is_array()) return FieldError("tools", "must be an array");
  OrderedJson out = OrderedJson::array();
  for (size_t k = 0; k < tools.size(); ++k) {
    const std::string field = Indexed("tools", k);
    auto type = TypeOf(tools[k], field);
    if (!type.ok()) return type.status();
    if (*type != "function") continue;  // hosted and namespace tools: see the header
    auto name = RequiredString(tools[k], "name", field);
    if (!name.ok()) return name.status();
    OrderedJson function = {{"name", *name}};
    if (tools[k].contains("description") && tools[k]["description"].is_string()) {
      function["description"] = tools[k]["description"];
    }
    if (tools[k].contains("parameters") && !tools[k]["parameters"].is_null()) {
      if (!tools[k]["parameters"].is_object()) {
        return FieldError(field + ".parameters", "must be an object");
      }
      function["parameters"] = tools[k]["parameters"];
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

absl::StatusOr<ConvertedMessages> ResponsesConversation(const OrderedJson& doc) {
  InputConverter input;
  std::string instructions;
  if (absl::Status s = ReadString(doc, "instructions", &instructions); !s.ok()) return s;
  if (!instructions.empty())
    input.out().Add({{"role", "system"}, {"content", instructions}}, "instructions");
  if (!doc.contains("input") || doc["input"].is_null()) return FieldError("input", "is required");
  const OrderedJson& items = doc["input"];
  if (items.is_string()) {
    input.out().Add({{"role", "user"}, {"content", items}}, "input");
  } else if (items.is_array()) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (absl::Status s = input.Item(items[i], Indexed("input", i)); !s.ok()) return s;
    }
  } else {
    return FieldError("input", "must be a string or an array of items");
  }
  ConvertedMessages out = input.Done();
  if (out.empty()) return FieldError("input", "has no message to render");
  if (doc.contains("tools") && !doc["tools"].is_null()) {
    auto tools = ResponsesTools(doc["tools"]);
    if (!tools.ok()) return tools.status();
    out.SetTools(*std::move(tools));
  }
  return out;
}

absl::Status ReadReasoningAndFormat(const OrderedJson& doc, ResponsesRequest* out) {
  if (doc.contains("reasoning") && !doc["reasoning"].is_null()) {
    if (!doc["reasoning"].is_object()) return FieldError("reasoning", "must be an object");
    if (absl::Status s = ReadString(doc["reasoning"], "effort", &out->turn.effort); !s.ok()) {
      return FieldError("reasoning.effort", "must be a string");
    }
  }
  if (doc.contains("text") && doc["text"].is_object() && doc["text"].contains("format") &&
      doc["text"]["format"].is_object()) {
    const OrderedJson& format = doc["text"]["format"];
    const std::string type = format.value("type", "text");
    std::optional<OrderedJson> schema;
    if (type == "json_schema") {
      schema = format.value("schema", OrderedJson::object());
    } else if (type == "json_object") {
      schema = OrderedJson{{"type", "object"}};
    } else if (type != "text") {
      return FieldError("text.format.type", absl::StrCat("\"", type, "\" is not supported"));
    }
    if (schema && !out->turn.messages.empty()) out->turn.messages[0].response_format = *schema;
  }
  return absl::OkStatus();
}

absl::Status RefuseUnsupportedResponses(const OrderedJson& doc) {
  if (doc.contains("previous_response_id") && !doc["previous_response_id"].is_null()) {
    return FieldError("previous_response_id",
                      "loom stores no responses; send the whole conversation as input");
  }
  if (doc.contains("tool_choice") && !doc["tool_choice"].is_null() &&
      doc["tool_choice"] != "auto") {
    return FieldError("tool_choice", "only \"auto\" is supported");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body) {
  auto doc = ParseJsonBody(body);
  if (!doc.ok()) return doc.status();
  ResponsesRequest out;
  out.turn.effort_field = "reasoning.effort";
  absl::Status status = ReadString(*doc, "model", &out.model);
  if (status.ok()) status = RefuseUnsupportedResponses(*doc);
  if (status.ok()) status = ReadPositiveInt(*doc, "max_output_tokens", &out.turn.max_tokens);
  if (status.ok()) {
    status = ReadSampling(*doc, 2, &out.turn.temperature, &out.turn.top_p);
  }
  if (status.ok()) status = ReadBool(*doc, "stream", &out.turn.stream);
  if (!status.ok()) return status;
  auto converted = ResponsesConversation(*doc);
  if (!converted.ok()) return converted.status();
  auto messages = converted->Parse();
  if (!messages.ok()) return messages.status();
  out.turn.messages = *std::move(messages);
  PlaceLateSystemMessages(&out.turn.messages);
  if (absl::Status s = ReadReasoningAndFormat(*doc, &out); !s.ok()) return s;
  return out;
}

namespace {

std::string ReasoningId(const std::string& response) { return "rs_" + response.substr(5); }
std::string MessageId(const std::string& response) { return "msg_" + response.substr(5); }
std::string CallItemId(const chat::ToolCall& call) { return "fc_" + call.id; }

OrderedJson ReasoningItem(const ResponsesTurn& turn, const std::string& text, const char* status) {
  OrderedJson content = OrderedJson::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"},
          {"id", ReasoningId(turn.id)},
          {"status", status},
          {"summary", OrderedJson::array()},
          {"content", std::move(content)}};
}

OrderedJson OutputText(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", OrderedJson::array()}};
}

OrderedJson MessageItem(const ResponsesTurn& turn, const std::string& text, const char* status) {
  OrderedJson content = OrderedJson::array();
  if (status != std::string_view("in_progress")) content.push_back(OutputText(text));
  return {{"type", "message"},
          {"id", MessageId(turn.id)},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

OrderedJson CallItem(const chat::ToolCall& call, const std::string& arguments, const char* status) {
  return {{"type", "function_call"}, {"id", CallItemId(call)}, {"call_id", call.id},
          {"name", call.name},       {"arguments", arguments}, {"status", status}};
}

OrderedJson Envelope(const ResponsesTurn& turn, const char* status, OrderedJson output,
                     bool with_usage) {
  OrderedJson response = {
      {"id", turn.id},    {"object", "response"},         {"created_at", turn.created_at},
      {"status", status}, {"model", turn.model},          {"output", std::move(output)},
      {"error", nullptr}, {"incomplete_details", nullptr}};
  if (std::string_view(status) == "incomplete") {
    response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
  if (with_usage) {
    response["usage"] = {{"input_tokens", turn.input_tokens},
                         {"input_tokens_details", {{"cached_tokens", 0}}},
                         {"output_tokens", turn.output_tokens},
                         {"output_tokens_details", {{"reasoning_tokens", 0}}},
                         {"total_tokens", turn.input_tokens + turn.output_tokens}};
  }
  return response;
}

}  // namespace

OrderedJson ResponseJson(const ResponsesTurn& turn) {
  OrderedJson output = OrderedJson::array();
  if (!turn.reasoning.empty()) output.push_back(ReasoningItem(turn, turn.reasoning, "completed"));
  if (!turn.content.empty()) output.push_back(MessageItem(turn, turn.content, "completed"));
  for (const chat::ToolCall& call : turn.tool_calls) {
    output.push_back(CallItem(call, call.arguments, "completed"));
  }
  return Envelope(turn, turn.incomplete ? "incomplete" : "completed", std::move(output), true);
}

std::string ResponsesStream::Event(const char* type, OrderedJson data) {
  OrderedJson event = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : data.items()) event[key] = std::move(value);
  return absl::StrCat("event: ", type, "\ndata: ", DumpJson(event), "\n\n");
}

// Events are appended one statement at a time: each takes the next
// sequence number, and the operands of `+` have no order.
std::string ResponsesStream::Start() {
  const OrderedJson response = Envelope(header_, "in_progress", OrderedJson::array(), false);
  std::string events = Event("response.created", {{"response", response}});
  events += Event("response.in_progress", {{"response", response}});
  return events;
}

std::string ResponsesStream::Open(Item item) {
  open_ = item;
  text_.clear();
  if (item == Item::kReasoning) {
    return Event(
        "response.output_item.added",
        {{"output_index", output_index_}, {"item", ReasoningItem(header_, "", "in_progress")}});
  }
  std::string events =
      Event("response.output_item.added",
            {{"output_index", output_index_}, {"item", MessageItem(header_, "", "in_progress")}});
  events += Event("response.content_part.added", {{"item_id", MessageId(header_.id)},
                                                  {"output_index", output_index_},
                                                  {"content_index", 0},
                                                  {"part", OutputText("")}});
  return events;
}

std::string ResponsesStream::Close() {
  std::string events;
  if (open_ == Item::kReasoning) {
    events += Event("response.reasoning_text.done", {{"item_id", ReasoningId(header_.id)},
                                                     {"output_index", output_index_},
                                                     {"content_index", 0},
                                                     {"text", text_}});
    events += Event(
        "response.output_item.done",
        {{"output_index", output_index_}, {"item", ReasoningItem(header_, text_, "completed")}});
  } else if (open_ == Item::kMessage) {
    events += Event("response.output_text.done", {{"item_id", MessageId(header_.id)},
                                                  {"output_index", output_index_},
                                                  {"content_index", 0},
                                                  {"text", text_}});
    events += Event("response.content_part.done", {{"item_id", MessageId(header_.id)},
                                                   {"output_index", output_index_},
                                                   {"content_index", 0},
                                                   {"part", OutputText(text_)}});
    events += Event(
        "response.output_item.done",
        {{"output_index", output_index_}, {"item", MessageItem(header_, text_, "completed")}});
  } else {
    return "";
  }
  open_ = Item::kNone;
  ++output_index_;
  return events;
}

std::string ResponsesStream::Delta(const CompletionDelta& delta) {
  std::string events;
  auto write = [&](Item item, const char* type, const std::string& id, const std::string& text) {
    if (open_ != item) {
      events += Close();  // before Open, which changes what is open
      events += Open(item);
    }
    text_ += text;
    events += Event(
        type,
        {{"item_id", id}, {"output_index", output_index_}, {"content_index", 0}, {"delta", text}});
  };
  if (!delta.reasoning.empty()) {
    write(Item::kReasoning, "response.reasoning_text.delta", ReasoningId(header_.id),
          delta.reasoning);
  }
  if (!delta.content.empty()) {
    write(Item::kMessage, "response.output_text.delta", MessageId(header_.id), delta.content);
  }
  return events;
}

std::string ResponsesStream::Finish(const ResponsesTurn& turn) {
  std::string events = Close();
  for (const chat::ToolCall& call : turn.tool_calls) {
    events += Event("response.output_item.added",
                    {{"output_index", output_index_}, {"item", CallItem(call, "", "in_progress")}});
    events += Event("response.function_call_arguments.delta", {{"item_id", CallItemId(call)},
                                                               {"output_index", output_index_},
                                                               {"delta", call.arguments}});
    events += Event("response.function_call_arguments.done", {{"item_id", CallItemId(call)},
                                                              {"output_index", output_index_},
                                                              {"arguments", call.arguments}});
    events += Event(
        "response.output_item.done",
        {{"output_index", output_index_++}, {"item", CallItem(call, call.arguments, "completed")}});
  }
  events += Event(turn.incomplete ? "response.incomplete" : "response.completed",
                  {{"response", ResponseJson(turn)}});
  return events;
}

std::string ResponsesStream::Failed(const std::string& message) {
  OrderedJson response = Envelope(header_, "failed", OrderedJson::array(), false);
  response["error"] = {{"code", "server_error"}, {"message", message}};
  return Event("response.failed", {{"response", response}});
}

}  // namespace loom::serve
