// The Anthropic Messages dialect: requests shaped as Claude Code sends them
// become turns in the chat format's messages, every malformed or unsupported
// form is refused naming the request's own field, and a streamed response's
// events rebuild exactly the message the whole response gives.

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "loom/chat/encoder.h"
#include "loom/serve/anthropic_messages.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

OrderedJson Text(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

// A conversation as Claude Code 2.1 sends it after one tool call: system
// blocks with its billing header and cache hints, a system turn inside the
// messages, thinking, tool_use and tool_result blocks.
OrderedJson ClaudeCodeShaped() {
  return {
      {"model", "tiny"},
      {"system",
       {Text("x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"),
        {{"type", "text"},
         {"text", "You are an agent."},
         {"cache_control", {{"type", "ephemeral"}}}},
        Text("Be brief.")}},
      {"messages",
       {{{"role", "user"},
         {"content", {Text("<system-reminder>\nx\n</system-reminder>\n"), Text("Read a.txt")}}},
        {{"role", "system"}, {"content", {Text("# Environment")}}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "thinking"}, {"thinking", "I should read it."}, {"signature", "sig"}},
           Text("Reading."),
           {{"type", "tool_use"},
            {"id", "toolu_1"},
            {"name", "Read"},
            {"input", {{"path", "a.txt"}}}}}}},
        {{"role", "user"},
         {"content",
          {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", {Text("hello")}}},
           Text("Now say it.")}}}}},
      {"tools",
       {{{"name", "Read"},
         {"description", "Reads a file."},
         {"input_schema", {{"type", "object"}, {"properties", {{"path", {{"type", "string"}}}}}}}},
        {{"name", "Later"},
         {"description", "d"},
         {"input_schema", {{"type", "object"}}},
         {"defer_loading", true}}}},
      {"metadata", {{"user_id", "u"}}},
      {"max_tokens", 32000},
      {"thinking", {{"type", "adaptive"}, {"display", "omitted"}}},
      {"context_management", {{"edits", OrderedJson::array()}}},
      {"output_config", {{"effort", "high"}}},
      {"stop_sequences", {"END"}},
      {"temperature", 0.5},
      {"stream", true}};
}

TEST(AnthropicMessagesTest, AClaudeCodeRequestBecomesATurn) {
  auto r = ParseMessagesRequest(ClaudeCodeShaped().dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "tiny");
  EXPECT_TRUE(r->omit_thinking);
  const TurnRequest& turn = r->turn;
  EXPECT_TRUE(turn.stream);
  EXPECT_EQ(turn.effort, "high");
  EXPECT_EQ(turn.max_tokens, 32000);
  EXPECT_EQ(turn.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(turn.temperature, 0.5);
  EXPECT_EQ(turn.thinking, chat::ThinkingMode::kThinking);
  ASSERT_EQ(turn.messages.size(), 6u);
  // The billing header is metadata, not prompt.
  EXPECT_EQ(turn.messages[0].role, chat::Role::kSystem);
  EXPECT_EQ(turn.messages[0].content, "You are an agent.\nBe brief.");
  ASSERT_TRUE(turn.messages[0].tools.has_value());
  ASSERT_EQ(turn.messages[0].tools->size(), 2u);
  EXPECT_EQ((*turn.messages[0].tools)[0]["type"], "function");
  EXPECT_EQ((*turn.messages[0].tools)[0]["function"]["name"], "Read");
  EXPECT_EQ((*turn.messages[0].tools)[0]["function"]["parameters"]["properties"]["path"]["type"],
            "string");
  EXPECT_EQ(turn.messages[1].content, "<system-reminder>\nx\n</system-reminder>\n\nRead a.txt");
  // A system turn after the user's renders as a developer turn (PlaceLateSystemMessages).
  EXPECT_EQ(turn.messages[2].role, chat::Role::kDeveloper);
  EXPECT_EQ(turn.messages[2].content, "# Environment");
  const chat::Message& assistant = turn.messages[3];
  EXPECT_EQ(assistant.role, chat::Role::kAssistant);
  EXPECT_EQ(assistant.reasoning_content.value_or(""), "I should read it.");
  EXPECT_EQ(assistant.content, "Reading.");
  ASSERT_EQ(assistant.tool_calls.size(), 1u);
  EXPECT_EQ(assistant.tool_calls[0].name, "Read");
  EXPECT_EQ(OrderedJson::parse(assistant.tool_calls[0].arguments),
            OrderedJson({{"path", "a.txt"}}));
  // The tool result comes first, then the user's text, as the blocks are ordered.
  EXPECT_EQ(turn.messages[4].role, chat::Role::kTool);
  EXPECT_EQ(turn.messages[4].tool_call_id, "toolu_1");
  EXPECT_EQ(turn.messages[4].content, "hello");
  EXPECT_EQ(turn.messages[5].role, chat::Role::kUser);
  EXPECT_EQ(turn.messages[5].content, "Now say it.");
}

TEST(AnthropicMessagesTest, ALateSystemTurnStillLeavesThePromptOpenForTheAssistant) {
  const OrderedJson body = {{"max_tokens", 5},
                            {"messages",
                             {{{"role", "user"}, {"content", "hi"}},
                              {{"role", "system"}, {"content", "# Environment"}}}}};
  auto r = ParseMessagesRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string opening =
      std::string(tokenizer::dsv4::kAssistant) + std::string(tokenizer::dsv4::kThinkOpen);
  auto prompt = chat::EncodePrompt(r->turn.messages, {});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_TRUE(absl::EndsWith(*prompt, opening)) << *prompt;
  EXPECT_NE(prompt->find("# Environment"), std::string::npos);
  // As a system message it would have ended the prompt with its own text.
  std::vector<chat::Message> as_sent = r->turn.messages;
  as_sent[1].role = chat::Role::kSystem;
  auto broken = chat::EncodePrompt(as_sent, {});
  ASSERT_TRUE(broken.ok());
  EXPECT_FALSE(absl::EndsWith(*broken, opening)) << *broken;
}

TEST(AnthropicMessagesTest, SimpleFormsAndDefaults) {
  const OrderedJson body = {{"max_tokens", 5},
                            {"system", "Be brief."},
                            {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                            {"thinking", {{"type", "disabled"}}}};
  auto r = ParseMessagesRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->turn.stream);
  EXPECT_FALSE(r->omit_thinking);
  EXPECT_EQ(r->turn.thinking, chat::ThinkingMode::kChat);
  EXPECT_TRUE(r->turn.effort.empty());
  ASSERT_EQ(r->turn.messages.size(), 2u);
  EXPECT_EQ(r->turn.messages[0].content, "Be brief.");
  // count_tokens bodies carry no max_tokens.
  OrderedJson count = body;
  count.erase("max_tokens");
  EXPECT_FALSE(ParseMessagesRequest(count.dump()).ok());
  EXPECT_TRUE(ParseMessagesRequest(count.dump(), /*count_tokens=*/true).ok());
}

TEST(AnthropicMessagesTest, EveryMalformedFormIsRefusedNamingItsField) {
  const OrderedJson ok = {{"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  ASSERT_TRUE(ParseMessagesRequest(ok.dump()).ok());
  auto with = [&](const std::string& key, const OrderedJson& value) {
    OrderedJson body = ok;
    body[key] = value;
    return body.dump();
  };
  auto message = [&](const OrderedJson& m) { return with("messages", OrderedJson::array({m})); };
  const OrderedJson call = {
      {"role", "assistant"},
      {"content", {{{"type", "tool_use"}, {"id", "t1"}, {"name", "f"}, {"input", {{"a", 1}}}}}}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"messages\": [", "the body is not JSON"},
      {"[1]", "the body is not a JSON object"},
      {with("max_tokens", nullptr), "max_tokens: is required"},
      {with("max_tokens", 0), "max_tokens"},
      {with("max_tokens", "9"), "max_tokens"},
      {with("messages", OrderedJson::array()), "messages"},
      {with("messages", "hi"), "messages"},
      {message({{"role", "wizard"}, {"content", "x"}}), "messages[0].role"},
      {message({{"content", "x"}}), "messages[0].role"},
      {message({{"role", "user"}}), "messages[0].content"},
      {message({{"role", "user"}, {"content", 7}}), "messages[0].content"},
      {message({{"role", "user"}, {"content", {{{"text", "no type"}}}}}),
       "messages[0].content[0].type"},
      {message({{"role", "user"}, {"content", {{{"type", "text"}, {"text", 3}}}}}),
       "messages[0].content[0].text"},
      {message({{"role", "user"},
                {"content", {{{"type", "image"}, {"source", {{"type", "base64"}}}}}}}),
       "messages[0].content[0].type"},
      {message({{"role", "user"}, {"content", {{{"type", "tool_result"}, {"content", "r"}}}}}),
       "messages[0].content[0].tool_use_id"},
      {message({{"role", "user"},
                {"content", {{{"type", "tool_result"}, {"tool_use_id", "t"}, {"content", 5}}}}}),
       "messages[0].content[0].content"},
      {message(
           {{"role", "assistant"},
            {"content", {{{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", "{}"}}}}}),
       "messages[0].content[0].input"},
      {message(
           {{"role", "assistant"},
            {"content", {{{"type", "tool_use"}, {"id", "t"}, {"input", OrderedJson::object()}}}}}),
       "messages[0].content[0].name"},
      {message({{"role", "assistant"}, {"content", {{{"type", "thinking"}}}}}),
       "messages[0].content[0].thinking"},
      // A result for a call that was never made: found after conversion, named as sent.
      {with(
           "messages",
           {{{"role", "user"}, {"content", "go"}},
            {{"role", "user"},
             {"content", {{{"type", "tool_result"}, {"tool_use_id", "nope"}, {"content", "r"}}}}}}),
       "messages[1].content[0]"},
      {with("system", 5), "system"},
      {with("system", {{{"type", "image"}}}), "system[0].type"},
      {with("tools", "x"), "tools"},
      {with("tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}), "tools[0].type"},
      {with("tools", {{{"name", "f"}}}), "tools[0].input_schema"},
      {with("tools", {{{"input_schema", OrderedJson::object()}}}), "tools[0].name"},
      {with("temperature", 1.5), "temperature"},
      {with("top_p", 0), "top_p"},
      {with("top_k", 5), "top_k"},
      {with("tool_choice", {{"type", "any"}}), "tool_choice"},
      {with("stop_sequences", "END"), "stop_sequences"},
      {with("stop_sequences", {""}), "stop_sequences[0]"},
      {with("stream", "yes"), "stream"},
      {with("thinking", {{"type", "sometimes"}}), "thinking.type"},
      {with("thinking", 1), "thinking"},
      {with("output_config", {{"effort", 3}}), "output_config.effort"},
      {with("model", 3), "model"},
  };
  for (const auto& [body, field] : cases) {
    auto r = ParseMessagesRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(std::string(r.status().message()).find(field), std::string::npos)
        << body << " -> " << r.status();
  }
  EXPECT_TRUE(
      ParseMessagesRequest(with("messages", {{{"role", "user"}, {"content", "go"}}, call})).ok());
}

TEST(AnthropicMessagesTest, ErrorsHaveTheirDialectsShape) {
  const OrderedJson e = OrderedJson::parse(MessagesError({400, "max_tokens: is required", ""}));
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["message"], "max_tokens: is required");
  EXPECT_EQ(OrderedJson::parse(MessagesError({401, "key", ""}))["error"]["type"],
            "authentication_error");
  EXPECT_EQ(OrderedJson::parse(MessagesError({404, "route", ""}))["error"]["type"],
            "not_found_error");
  EXPECT_EQ(OrderedJson::parse(MessagesError({500, "model", ""}))["error"]["type"], "api_error");
}

MessagesTurn Named(const std::string& id) {
  MessagesTurn turn;
  turn.id = id;
  turn.model = "tiny";
  return turn;
}

// Folds a stream's events back into a message, as the Anthropic SDK does.
OrderedJson Accumulate(const std::string& stream, std::vector<std::string>* names) {
  OrderedJson message;
  for (absl::string_view event : absl::StrSplit(stream, "\n\n", absl::SkipEmpty())) {
    std::vector<std::string> lines = absl::StrSplit(event, '\n');
    EXPECT_EQ(lines.size(), 2u) << event;
    EXPECT_EQ(lines[0].rfind("event: ", 0), 0u) << event;
    EXPECT_EQ(lines[1].rfind("data: ", 0), 0u) << event;
    const std::string name = lines[0].substr(7);
    const OrderedJson data = OrderedJson::parse(lines[1].substr(6));
    EXPECT_EQ(data["type"], name);
    names->push_back(name);
    if (name == "message_start") {
      message = data["message"];
    } else if (name == "content_block_start") {
      EXPECT_EQ(data["index"], message["content"].size());
      message["content"].push_back(data["content_block"]);
    } else if (name == "content_block_delta") {
      OrderedJson& block = message["content"][data["index"].get<size_t>()];
      const OrderedJson& delta = data["delta"];
      if (delta["type"] == "text_delta") {
        block["text"] = block["text"].get<std::string>() + delta["text"].get<std::string>();
      } else if (delta["type"] == "thinking_delta") {
        block["thinking"] =
            block["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
      } else if (delta["type"] == "signature_delta") {
        block["signature"] = delta["signature"];
      } else if (delta["type"] == "input_json_delta") {
        block["partial"] = block.value("partial", "") + delta["partial_json"].get<std::string>();
      }
    } else if (name == "content_block_stop") {
      OrderedJson& block = message["content"][data["index"].get<size_t>()];
      if (block.contains("partial")) {
        block["input"] = OrderedJson::parse(block["partial"].get<std::string>());
        block.erase("partial");
      }
    } else if (name == "message_delta") {
      message["stop_reason"] = data["delta"]["stop_reason"];
      message["stop_sequence"] = data["delta"]["stop_sequence"];
      message["usage"] = data["usage"];
    }
  }
  return message;
}

TEST(AnthropicMessagesTest, AStreamRebuildsTheWholeMessage) {
  MessagesTurn turn = Named("msg_1");
  turn.reasoning = "think hard";
  turn.content = "Reading it.";
  turn.tool_calls = {{"call_1_0", "Read", "{\"path\":\"a.txt\"}"},
                     {"call_1_1", "Bash", "{\"command\":\"ls\"}"}};
  turn.stop_reason = "tool_use";
  turn.input_tokens = 40;
  turn.output_tokens = 12;
  MessagesStream stream(turn.id, turn.model, /*omit_thinking=*/false);
  std::string events = stream.Delta({"think ", ""}, 40);
  events += stream.Delta({"hard", "Read"}, 40);
  events += stream.Delta({"", "ing it."}, 40);
  events += stream.Finish(turn);
  std::vector<std::string> names;
  const OrderedJson rebuilt = Accumulate(events, &names);
  EXPECT_EQ(rebuilt, MessageJson(turn)) << rebuilt.dump(1);
  EXPECT_EQ(names.front(), "message_start");
  EXPECT_EQ(names.back(), "message_stop");
  EXPECT_EQ(std::count(names.begin(), names.end(), "message_start"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "content_block_start"), 4);
  EXPECT_EQ(std::count(names.begin(), names.end(), "content_block_stop"), 4);
}

TEST(AnthropicMessagesTest, OmittedThinkingAndAStopSequence) {
  MessagesTurn turn = Named("msg_2");
  turn.content = "ok";
  turn.stop_reason = "stop_sequence";
  turn.stop_sequence = "END";
  turn.input_tokens = 7;
  MessagesStream stream(turn.id, turn.model, /*omit_thinking=*/true);
  std::string events = stream.Delta({"secret reasoning", ""}, 7);
  events += stream.Delta({"", "ok"}, 7);
  events += stream.Finish(turn);
  EXPECT_EQ(events.find("secret"), std::string::npos);
  std::vector<std::string> names;
  const OrderedJson rebuilt = Accumulate(events, &names);
  EXPECT_EQ(rebuilt, MessageJson(turn)) << rebuilt.dump(1);
  EXPECT_EQ(rebuilt["stop_sequence"], "END");
  // A turn with nothing to show still has a well-formed stream.
  MessagesStream empty("msg_3", "tiny", false);
  MessagesTurn nothing = Named("msg_3");
  nothing.stop_reason = "max_tokens";
  names.clear();
  EXPECT_EQ(Accumulate(empty.Finish(nothing), &names), MessageJson(nothing));
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "message_delta", "message_stop"}));
}

}  // namespace
}  // namespace loom::serve
