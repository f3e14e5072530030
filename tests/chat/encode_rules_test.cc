// One test per rule of shared/dsv4-format.md ("Encoding"), with expected
// prompts written out by hand from the rules.

#include <gtest/gtest.h>

#include "chat/chat_test_util.h"

namespace loom::chat {
namespace {

using testing::Chat;
using testing::Prompt;

const std::string B = "<｜begin▁of▁sentence｜>", E = "<｜end▁of▁sentence｜>", U = "<｜User｜>",
                  A = "<｜Assistant｜>", TO = "<think>", TC = "</think>",
                  LR = "<｜latest_reminder｜>", D = "｜DSML｜";

TEST(EncodeRulesTest, ThinkingModeOpensThinkingAfterTheLastUser) {
  EXPECT_EQ(Prompt(R"([{"role":"system","content":"S"},{"role":"user","content":"Q"}])"),
            B + "S" + U + "Q" + A + TO);
}

TEST(EncodeRulesTest, ChatModeClosesThinkingAndRendersNoReasoning) {
  EXPECT_EQ(Prompt(R"([{"role":"user","content":"Q"},
                       {"role":"assistant","reasoning_content":"R","content":"C"}])",
                   Chat()),
            B + U + "Q" + A + TC + "C" + E);
}

TEST(EncodeRulesTest, LastAssistantKeepsItsReasoning) {
  EXPECT_EQ(Prompt(R"([{"role":"user","content":"Q"},
                       {"role":"assistant","reasoning_content":"R","content":"C"}])"),
            B + U + "Q" + A + TO + "R" + TC + "C" + E);
}

const char* kDropCase = R"([{"role":"system","content":"S"},{"role":"developer","content":"D"},
    {"role":"user","content":"Q1"},{"role":"assistant","reasoning_content":"R1","content":"C1"},
    {"role":"user","content":"Q2"}])";

TEST(EncodeRulesTest, DropThinkingRemovesEarlierDeveloperAndReasoning) {
  EXPECT_EQ(Prompt(kDropCase), B + "S" + U + "Q1" + A + TC + "C1" + E + U + "Q2" + A + TO);
}

TEST(EncodeRulesTest, NoDropThinkingKeepsEverything) {
  EncodeOptions o;
  o.drop_thinking = false;
  EXPECT_EQ(Prompt(kDropCase, o),
            B + "S" + U + "D" + U + "Q1" + A + TO + "R1" + TC + "C1" + E + U + "Q2" + A + TO);
}

TEST(EncodeRulesTest, ToolsOnAnyMessageTurnDropThinkingOff) {
  const std::string prompt = Prompt(R"([
      {"role":"system","content":"S","tools":[{"type":"function","function":{"name":"f"}}]},
      {"role":"user","content":"Q1"},{"role":"assistant","reasoning_content":"R1","content":"C1"},
      {"role":"user","content":"Q2"}])");
  EXPECT_NE(prompt.find(U + "Q1" + A + TO + "R1" + TC + "C1" + E + U + "Q2" + A + TO),
            std::string::npos)
      << prompt;
}

TEST(EncodeRulesTest, ToolResultsMergeInCallOrderWithTheFollowingUserText) {
  const std::string prompt = Prompt(R"([{"role":"user","content":"Q"},
      {"role":"assistant","reasoning_content":"R","tool_calls":[
        {"id":"a","type":"function","function":{"name":"f1","arguments":"{\"x\": 1}"}},
        {"id":"b","type":"function","function":{"name":"f2","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"b","content":"RB"},
      {"role":"tool","tool_call_id":"a","content":"RA"},
      {"role":"user","content":"more"}])");
  EXPECT_EQ(prompt, B + U + "Q" + A + TC + "\n\n<" + D + "tool_calls>\n<" + D +
                        "invoke name=\"f1\">\n<" + D + "parameter name=\"x\" string=\"false\">1</" +
                        D + "parameter>\n</" + D + "invoke>\n<" + D + "invoke name=\"f2\">\n\n</" +
                        D + "invoke>\n</" + D + "tool_calls>" + E + U +
                        "<tool_result>RA</tool_result>\n\n<tool_result>RB</tool_result>\n\nmore" +
                        A + TO);
}

TEST(EncodeRulesTest, UserWithTaskAfterToolResultsStaysSeparate) {
  const std::string prompt = Prompt(R"([{"role":"user","content":"Q"},
      {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"a","content":"R"},
      {"role":"user","content":"T","task":"query"}])");
  EXPECT_EQ(prompt, B + U + "Q" + A + TC + "\n\n<" + D + "tool_calls>\n<" + D +
                        "invoke name=\"f\">\n\n</" + D + "invoke>\n</" + D + "tool_calls>" + E + U +
                        "<tool_result>R</tool_result>" + U + "T" + "<｜query｜>");
}

TEST(EncodeRulesTest, ActionTaskAddsAssistantThinkingAndActionTokens) {
  const char* action = R"([{"role":"user","content":"do","task":"action"}])";
  EXPECT_EQ(Prompt(action), B + U + "do" + A + TO + "<｜action｜>");
  EXPECT_EQ(Prompt(action, Chat()), B + U + "do" + A + TC + "<｜action｜>");
  EXPECT_EQ(Prompt(R"([{"role":"user","content":"t","task":"title"}])"), B + U + "t<｜title｜>");
}

TEST(EncodeRulesTest, AssistantAfterATaskHasNoReasoning) {
  EXPECT_EQ(Prompt(R"([{"role":"user","content":"Q","task":"action"},
                       {"role":"assistant","reasoning_content":"R","content":"C"}])"),
            B + U + "Q" + A + TO + "<｜action｜>" + "C" + E);
}

TEST(EncodeRulesTest, WithoutEosLeavesTheAssistantOpen) {
  EXPECT_EQ(Prompt(R"([{"role":"user","content":"Q"},
                       {"role":"assistant","content":"C","wo_eos":true}])"),
            B + U + "Q" + A + TO + TC + "C");
}

TEST(EncodeRulesTest, LatestReminderFollowsTheAssistantPrefix) {
  EXPECT_EQ(Prompt(R"([{"role":"system","content":"S"},{"role":"user","content":"Q"},
                       {"role":"latest_reminder","content":"R"}])"),
            B + "S" + U + "Q" + A + TO + LR + "R");
}

TEST(EncodeRulesTest, ResponseFormatBlockUsesPromptJson) {
  EXPECT_EQ(Prompt(R"([{"role":"system","content":"S","response_format":
                         {"type":"json_object","schema":{"b":1,"a":[1,2],"s":"é"}}},
                       {"role":"user","content":"Q"}])"),
            B +
                "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema "
                "to reply:\n{\"type\": \"json_object\", \"schema\": {\"b\": 1, \"a\": [1, 2], "
                "\"s\": \"é\"}}" +
                U + "Q" + A + TO);
}

TEST(EncodeRulesTest, EmptyResponseFormatRendersNothing) {
  EXPECT_EQ(Prompt(R"([{"role":"system","content":"S","response_format":{}},
                       {"role":"user","content":"Q"}])"),
            B + "S" + U + "Q" + A + TO);
}

TEST(EncodeRulesTest, DeveloperRendersAsUserWithItsTools) {
  const std::string prompt = Prompt(R"([{"role":"developer","content":"Dev",
      "tools":[{"type":"function","function":{"name":"f","description":"天气","parameters":{"z":1,"a":2}}}]}])");
  const std::string head = B + U + "Dev\n\n## Tools\n\nYou have access to a set of tools";
  EXPECT_EQ(prompt.substr(0, head.size()), head);
  EXPECT_NE(prompt.find("### Available Tool Schemas\n\n{\"name\": \"f\", \"description\": "
                        "\"天气\", \"parameters\": {\"z\": 1, \"a\": 2}}\n\nYou MUST strictly "
                        "follow the above defined tool name and parameter schemas to invoke tool "
                        "calls.\n" +
                        A + TO),
            std::string::npos)
      << prompt;
}

TEST(EncodeRulesTest, ReasoningEffortPrefixes) {
  const char* msgs = R"([{"role":"system","content":"S"},{"role":"user","content":"Q"}])";
  EncodeOptions o;
  o.reasoning_effort = *ParseReasoningEffort("v4-max");
  EXPECT_EQ(Prompt(msgs, o),
            B +
                "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very "
                "thorough in your thinking and comprehensively decompose the problem to resolve "
                "the root cause, rigorously stress-testing your logic against all potential "
                "paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire "
                "deliberation process, documenting every intermediate step, considered "
                "alternative, and rejected hypothesis to ensure absolutely no assumption is left "
                "unchecked.\n\nS" +
                U + "Q" + A + TO);
  o.reasoning_effort = *ParseReasoningEffort("42");
  EXPECT_EQ(Prompt(msgs, o), B +
                                 "Reasoning Effort: 42 (range 1\u2013100; higher values request "
                                 "more thorough reasoning)\n\nS" +
                                 U + "Q" + A + TO);
  o.reasoning_effort = *ParseReasoningEffort("v4-high");
  EXPECT_EQ(Prompt(msgs, o), B + "S" + U + "Q" + A + TO);
  // The tiers are numeric efforts: max = 100, high = 75, low = 50.
  for (const auto& [tier, b] :
       {std::pair<const char*, int>{"max", 100}, {"high", 75}, {"low", 50}}) {
    o.reasoning_effort = *ParseReasoningEffort(tier);
    EXPECT_EQ(Prompt(msgs, o), B + "Reasoning Effort: " + std::to_string(b) +
                                   " (range 1\u2013100; higher values request more thorough "
                                   "reasoning)\n\nS" +
                                   U + "Q" + A + TO)
        << tier;
  }
  o.reasoning_effort = *ParseReasoningEffort("v4-max");
  o.thinking_mode = ThinkingMode::kChat;
  EXPECT_EQ(Prompt(msgs, o), B + "S" + U + "Q" + A + TC);
  for (const char* bad : {"0", "101", "abc", "5x", "-3", "Max", "medium"}) {
    EXPECT_FALSE(ParseReasoningEffort(bad).ok()) << bad;
  }
}

TEST(EncodeRulesTest, NoBosOption) {
  EncodeOptions o;
  o.add_bos = false;
  EXPECT_EQ(Prompt(R"([{"role":"user","content":"Q"}])", o), U + "Q" + A + TO);
}

TEST(EncodeRulesTest, ToolCallArgumentsRenderStringsRawAndOtherValuesAsJson) {
  const std::string prompt = Prompt(R"([{"role":"user","content":"Q"},
      {"role":"assistant","content":"","tool_calls":[
        {"function":{"name":"f","arguments":"{\"q\": \"h\u00e9llo \\\"x\\\"\", \"n\": 3, \"o\": {\"z\": [true, null], \"a\": 1.5}}"}},
        {"function":{"name":"g","arguments":"[1,2]"}}]}])");
  const std::string expected_calls =
      "\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"f\">\n<" + D +
      "parameter name=\"q\" string=\"true\">héllo \"x\"</" + D + "parameter>\n<" + D +
      "parameter name=\"n\" string=\"false\">3</" + D + "parameter>\n<" + D +
      "parameter name=\"o\" string=\"false\">{\"z\": [true, null], \"a\": 1.5}</" + D +
      "parameter>\n</" + D + "invoke>\n<" + D + "invoke name=\"g\">\n<" + D +
      "parameter name=\"arguments\" string=\"true\">[1,2]</" + D + "parameter>\n</" + D +
      "invoke>\n</" + D + "tool_calls>" + E;
  EXPECT_EQ(prompt, B + U + "Q" + A + TO + TC + expected_calls);
}

}  // namespace
}  // namespace loom::chat
