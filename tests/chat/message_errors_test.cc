// Malformed messages are INVALID_ARGUMENT errors naming messages[i].field.

#include <gtest/gtest.h>

#include "loom/chat/message.h"

namespace loom::chat {
namespace {

void ExpectError(const std::string& json, const std::string& where) {
  auto messages = MessagesFromJson(OrderedJson::parse(json));
  ASSERT_FALSE(messages.ok()) << json;
  EXPECT_EQ(messages.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(messages.status().message().find(where), std::string::npos) << messages.status();
}

TEST(MessageErrorsTest, UnknownRole) {
  ExpectError(R"([{"role":"user","content":"a"},{"role":"robot","content":"b"}])",
              "messages[1].role: unknown role \"robot\"");
  ExpectError(R"([{"content":"b"}])", "messages[0].role");
}

TEST(MessageErrorsTest, NonStringContent) {
  ExpectError(R"([{"role":"user","content":[{"type":"text","text":"x"}]}])",
              "messages[0].content: must be a string");
  ExpectError(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b",
                  "reasoning_content":5}])",
              "messages[1].reasoning_content");
}

TEST(MessageErrorsTest, ToolResultWithoutMatchingCall) {
  ExpectError(R"([{"role":"user","content":"a"},{"role":"tool","tool_call_id":"x","content":"r"}])",
              "messages[1].role: tool result without a preceding assistant tool call");
  ExpectError(R"([{"role":"user","content":"a"},
                  {"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]},
                  {"role":"tool","tool_call_id":"c2","content":"r"}])",
              "messages[2].tool_call_id");
}

TEST(MessageErrorsTest, BadToolCalls) {
  ExpectError(
      R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}])",
      "messages[0].tool_calls[0].function.arguments: is not valid JSON");
  ExpectError(R"([{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}])",
              "messages[0].tool_calls[0].function.name");
  ExpectError(R"([{"role":"assistant","tool_calls":{"a":1}}])", "messages[0].tool_calls");
  ExpectError(R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":7}}]}])",
              "messages[0].tool_calls[0].function.arguments");
}

TEST(MessageErrorsTest, BadOptionalFields) {
  ExpectError(R"([{"role":"user","content":"a","task":"dance"}])", "messages[0].task");
  ExpectError(R"([{"role":"user","content":"a","wo_eos":"yes"}])", "messages[0].wo_eos");
  ExpectError(R"([{"role":"system","content":"a","tools":[{"type":"function"}]}])",
              "messages[0].tools[0].function");
  ExpectError(R"([{"role":"system","content":"a","tools":{}}])", "messages[0].tools");
  ExpectError(R"([5])", "messages[0]: must be an object");
  ExpectError(R"({"role":"user"})", "messages: must be a JSON array");
}

TEST(MessageErrorsTest, NullContentAndMatchingIdsAreFine) {
  auto messages = MessagesFromJson(OrderedJson::parse(R"([{"role":"user","content":"a"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"r"}])"));
  EXPECT_TRUE(messages.ok()) << messages.status();
}

TEST(MessageErrorsTest, ConversationObjectPutsToolsOnTheFirstMessage) {
  auto messages = ConversationFromJson(OrderedJson::parse(
      R"({"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"s"}]})"));
  ASSERT_TRUE(messages.ok()) << messages.status();
  ASSERT_TRUE((*messages)[0].tools.has_value());
  EXPECT_FALSE(ConversationFromJson(OrderedJson::parse(R"({"tools":[]})")).ok());
}

}  // namespace
}  // namespace loom::chat
