// ParseCompletion: valid completions in both modes, the round trip with the
// encoder, and a reason for every rule a completion can break.

#include <gtest/gtest.h>

#include "chat/chat_test_util.h"
#include "loom/chat/parser.h"

namespace loom::chat {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>", kDsml = "｜DSML｜";

std::string Calls(const std::string& invokes) {
  return "\n\n<" + kDsml + "tool_calls>\n" + invokes + "\n</" + kDsml + "tool_calls>";
}
std::string Invoke(const std::string& name, const std::string& params) {
  return "<" + kDsml + "invoke name=\"" + name + "\">\n" + params + "\n</" + kDsml + "invoke>";
}
std::string Param(const std::string& k, bool str, const std::string& v) {
  return "<" + kDsml + "parameter name=\"" + k + "\" string=\"" + (str ? "true" : "false") + "\">" +
         v + "</" + kDsml + "parameter>";
}

void ExpectParseError(const std::string& text, ThinkingMode mode, const std::string& reason) {
  auto parsed = ParseCompletion(text, mode);
  ASSERT_FALSE(parsed.ok()) << text;
  EXPECT_NE(parsed.status().message().find(reason), std::string::npos) << parsed.status();
}

TEST(ParseTest, ThinkingCompletionWithContent) {
  auto m = ParseCompletion("Let me think.</think>Paris." + kEos, ThinkingMode::kThinking);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->reasoning_content, "Let me think.");
  EXPECT_EQ(m->content, "Paris.");
  EXPECT_TRUE(m->tool_calls.empty());
}

TEST(ParseTest, ChatCompletionHasNoReasoning) {
  auto m = ParseCompletion("Hello" + kEos, ThinkingMode::kChat);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->content, "Hello");
  EXPECT_EQ(m->reasoning_content, "");
}

TEST(ParseTest, ToolCallsRebuildArgumentsJson) {
  const std::string text =
      "r</think>" +
      Calls(Invoke("get", Param("city", true, "Zürich \"Z\"") + "\n" + Param("n", false, "3") +
                              "\n" + Param("o", false, "{\"a\": [1]}")) +
            "\n" + Invoke("none", "")) +
      kEos;
  auto m = ParseCompletion(text, ThinkingMode::kThinking);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->tool_calls.size(), 2u);
  EXPECT_EQ(m->tool_calls[0].name, "get");
  EXPECT_EQ(m->tool_calls[0].arguments,
            "{\"city\": \"Zürich \\\"Z\\\"\", \"n\": 3, \"o\": {\"a\": [1]}}");
  EXPECT_EQ(m->tool_calls[1].name, "none");
  EXPECT_EQ(m->tool_calls[1].arguments, "{}");
  EXPECT_EQ(m->content, "");
  // The block may also end the text without EOS.
  EXPECT_TRUE(
      ParseCompletion(text.substr(0, text.size() - kEos.size()), ThinkingMode::kThinking).ok());
}

TEST(ParseTest, EncodedAssistantMessageParsesBack) {
  const char* messages = R"([{"role":"user","content":"Q"},
      {"role":"assistant","reasoning_content":"R\nmore","content":"C <b>",
       "tool_calls":[{"function":{"name":"f","arguments":"{\"s\": \"x<y\", \"n\": [1, 2]}"}}]}])";
  const std::string prompt = testing::Prompt(messages);
  const std::string prefix = "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>";
  ASSERT_EQ(prompt.substr(0, prefix.size()), prefix);
  auto m = ParseCompletion(prompt.substr(prefix.size()), ThinkingMode::kThinking);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->reasoning_content, "R\nmore");
  EXPECT_EQ(m->content, "C <b>");
  ASSERT_EQ(m->tool_calls.size(), 1u);
  EXPECT_EQ(m->tool_calls[0].arguments, "{\"s\": \"x<y\", \"n\": [1, 2]}");
}

TEST(ParseTest, ReasoningMustEnd) {
  ExpectParseError("still thinking", ThinkingMode::kThinking, "missing </think>");
  ExpectParseError("r" + Calls(Invoke("f", "")) + kEos, ThinkingMode::kThinking,
                   "tool calls before </think>");
}

TEST(ParseTest, ContentMustEnd) {
  ExpectParseError("r</think>cut off", ThinkingMode::kThinking, "missing end of sentence");
  ExpectParseError("", ThinkingMode::kChat, "missing end of sentence");
}

TEST(ParseTest, NothingAfterTheEnd) {
  ExpectParseError("a" + kEos + "b", ThinkingMode::kChat, "after end of sentence");
  ExpectParseError("a" + kEos + kEos, ThinkingMode::kChat, "after end of sentence");
  ExpectParseError("a" + Calls(Invoke("f", "")) + "x" + kEos, ThinkingMode::kChat,
                   "after the tool calls");
}

TEST(ParseTest, SpecialStringsMayNotAppearInText) {
  ExpectParseError("a<think>b" + kEos, ThinkingMode::kChat, "'<think>' in content");
  ExpectParseError("x<｜begin▁of▁sentence｜></think>a" + kEos, ThinkingMode::kThinking,
                   "in reasoning");
  ExpectParseError("a " + kDsml + " b" + kEos, ThinkingMode::kChat, "｜DSML｜");
}

TEST(ParseTest, ToolCallFormatErrors) {
  ExpectParseError("a" + Calls(Invoke("f", Param("k", true, "1") + "\n" + Param("k", true, "2"))),
                   ThinkingMode::kChat, "duplicate parameter name 'k'");
  ExpectParseError("a\n\n<" + kDsml + "tool_calls>\n" + Invoke("f", ""), ThinkingMode::kChat,
                   "not closed");
  ExpectParseError(
      "a\n\n<" + kDsml + "tool_calls> \n" + Invoke("f", "") + "\n</" + kDsml + "tool_calls>",
      ThinkingMode::kChat, "expected '>\\n'");
  ExpectParseError("a" + Calls("<" + kDsml + "invoke nam=\"f\">\n\n</" + kDsml + "invoke>"),
                   ThinkingMode::kChat, "tool name format error");
  ExpectParseError(
      "a" + Calls(Invoke("f", "<" + kDsml + "parameter name=\"k\" string=\"maybe\">v</" + kDsml +
                                  "parameter>")),
      ThinkingMode::kChat, "parameter format error");
  ExpectParseError("a" + Calls(Invoke("f", "<" + kDsml + "parameter name=\"k\" string=\"true\">v")),
                   ThinkingMode::kChat, "not closed");
}

TEST(ParseTest, JsonOutputHasTheDocumentedShape) {
  auto m = ParseCompletion("r</think>" + Calls(Invoke("f", Param("a", false, "1"))) + kEos,
                           ThinkingMode::kThinking);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(ParsedMessageToJson(*m).dump(),
            R"({"role":"assistant","content":"","reasoning_content":"r","tool_calls":)"
            R"([{"type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]})");
}

}  // namespace
}  // namespace loom::chat
