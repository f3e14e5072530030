// The Chat Completions dialect: requests as Pi and OpenCode send them become
// turns, every malformed or unsupported form is refused naming its field, and
// responses and stream chunks have the shape OpenAI clients parse.

#include <gtest/gtest.h>

#include "loom/serve/chat_completions.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;

TEST(ChatCompletionsTest, AToolUsingRequestBecomesATurn) {
  const OrderedJson body = {
      {"model", "tiny"},
      {"messages",
       {{{"role", "system"},
         {"content",
          {{{"type", "text"}, {"text", "Be brief."}}, {{"type", "text"}, {"text", "Use tools."}}}}},
        {{"role", "user"}, {"content", "Read a.txt"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", "read"}, {"arguments", "{\"path\":\"a.txt\"}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "hello"}}}},
      {"tools",
       {{{"type", "function"},
         {"function", {{"name", "read"}, {"parameters", {{"type", "object"}}}}}}}},
      {"reasoning_effort", "high"},
      {"max_completion_tokens", 99},
      {"stop", "END"},
      {"temperature", 0},
      {"top_p", 0.5},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"metadata", {{"anything", 1}}},
      {"parallel_tool_calls", true},
      {"tool_choice", "auto"}};
  auto r = ParseChatCompletionsRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "tiny");
  EXPECT_TRUE(r->include_usage);
  const TurnRequest& turn = r->turn;
  EXPECT_TRUE(turn.stream);
  EXPECT_EQ(turn.effort, "high");
  EXPECT_EQ(turn.max_tokens, 99);
  EXPECT_EQ(turn.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(turn.temperature, 0);
  EXPECT_EQ(turn.top_p, 0.5);
  ASSERT_EQ(turn.messages.size(), 4u);
  EXPECT_EQ(turn.messages[0].content, "Be brief.\nUse tools.");
  ASSERT_TRUE(turn.messages[0].tools.has_value());
  EXPECT_EQ((*turn.messages[0].tools)[0]["function"]["name"], "read");
  ASSERT_EQ(turn.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(turn.messages[2].tool_calls[0].name, "read");
  EXPECT_EQ(turn.messages[3].tool_call_id, "call_1");
}

TEST(ChatCompletionsTest, EveryMalformedFormIsRefusedNamingItsField) {
  const OrderedJson ok = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  ASSERT_TRUE(ParseChatCompletionsRequest(ok.dump()).ok());
  auto with = [&](const std::string& key, const OrderedJson& value) {
    OrderedJson body = ok;
    body[key] = value;
    return body.dump();
  };
  auto message = [&](const OrderedJson& m) { return OrderedJson{{"messages", {m}}}.dump(); };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"messages\": [", "the body is not JSON"},
      {"[1]", "the body is not a JSON object"},
      {"{}", "messages"},
      {with("messages", OrderedJson::array()), "messages"},
      {message({{"role", "wizard"}, {"content", "x"}}), "messages[0].role"},
      {message({{"role", "user"}, {"content", 7}}), "messages[0].content"},
      {message({{"role", "user"},
                {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}),
       "messages[0].content[0].type"},
      {message({{"role", "user"}, {"content", {{{"type", "text"}, {"text", 1}}}}}),
       "messages[0].content[0].text"},
      {message({{"role", "tool"}, {"content", "x"}}), "messages[0].role"},
      {message({{"role", "assistant"},
                {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{bad"}}}}}}}),
       "messages[0].tool_calls[0].function.arguments"},
      {with("tools", "x"), "tools"},
      {with("tools", {{{"type", "custom"}}}), "tools[0].type"},
      {with("tools", {{{"type", "function"}, {"function", {{"name", 3}}}}}),
       "tools[0].function.name"},
      {with("n", 2), "n"},
      {with("tool_choice", "required"), "tool_choice"},
      {with("presence_penalty", 0.5), "presence_penalty"},
      {with("frequency_penalty", "x"), "frequency_penalty"},
      {with("logit_bias", {{"42", 10}}), "logit_bias"},
      {with("temperature", 3), "temperature"},
      {with("temperature", "hot"), "temperature"},
      {with("top_p", 0), "top_p"},
      {with("max_tokens", 0), "max_tokens"},
      {with("max_completion_tokens", 1.5), "max_completion_tokens"},
      {with("stop", {"a", "b", "c", "d", "e"}), "stop"},
      {with("stop", {"a", ""}), "stop[1]"},
      {with("stream", "yes"), "stream"},
      {with("stream_options", {{"include_usage", 1}}), "stream_options.include_usage"},
      {with("reasoning_effort", 3), "reasoning_effort"},
      {with("model", 3), "model"},
      {with("response_format", {{"type", "grammar"}}), "response_format.type"},
  };
  for (const auto& [body, field] : cases) {
    auto r = ParseChatCompletionsRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(std::string(r.status().message()).rfind(field, 0), 0u)
        << "expected '" << field << "' first in: " << r.status().message();
  }
}

TEST(ChatCompletionsTest, ErrorsHaveOpenAisShapeWithTheFieldAsParam) {
  auto error =
      OrderedJson::parse(ChatCompletionsError({400, "messages[1].content: must be a string", ""}));
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(error["error"]["param"], "messages[1].content");
  EXPECT_TRUE(error["error"]["code"].is_null());
  auto auth = OrderedJson::parse(ChatCompletionsError({401, "a missing or wrong API key", ""}));
  EXPECT_EQ(auth["error"]["type"], "authentication_error");
  EXPECT_TRUE(auth["error"]["param"].is_null());
  auto context = OrderedJson::parse(
      ChatCompletionsError({400, "messages: too long", "context_length_exceeded"}));
  EXPECT_EQ(context["error"]["code"], "context_length_exceeded");
}

TEST(ChatCompletionsTest, ResponsesAndChunksCarryWhatClientsRead) {
  const ChatCompletionsId id{"chatcmpl-7", 1700000000, "tiny"};
  chat::ToolCall call;
  call.id = "call_7_0";
  call.name = "read";
  call.arguments = "{\"path\": \"a.txt\"}";
  OrderedJson whole = ChatCompletionJson(id, "why", "", {call}, "tool_calls", {10, 5});
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(whole["choices"][0]["message"]["reasoning_content"], "why");
  EXPECT_EQ(whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            call.arguments);
  EXPECT_EQ(whole["usage"]["total_tokens"], 15);

  const std::string event = ChatChunkEvent(id, ChatToolCallsDelta({call}), nullptr);
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  ASSERT_EQ(event.substr(event.size() - 2), "\n\n");
  OrderedJson chunk = OrderedJson::parse(event.substr(6));
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["id"], "call_7_0");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  OrderedJson usage = OrderedJson::parse(ChatUsageEvent(id, {3, 4}).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(ChatDelta({"r", ""}), (OrderedJson{{"reasoning_content", "r"}}));
}

}  // namespace
}  // namespace loom::serve
