// CompletionView: a completion streamed in pieces shows, joined, exactly what
// the chat module's parser makes of the whole text (an independent path),
// and never a piece of a marker or of a stop string.

#include <gtest/gtest.h>

#include "loom/chat/parser.h"
#include "loom/serve/completion_view.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::serve {
namespace {

namespace t = tokenizer::dsv4;
const std::string kEos(t::kEos);
const std::string kClose(t::kThinkClose);
const std::string kDsml(t::kDsml);

std::string ToolCallText() {
  return "\n\n<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"read\">\n<" + kDsml +
         "parameter name=\"path\" string=\"true\">a.txt</" + kDsml + "parameter>\n</" + kDsml +
         "invoke>\n</" + kDsml + "tool_calls>";
}

struct Shown {
  std::string reasoning, content;
  CompletionEnd end;
};

// Feeds `text` cut every `step` bytes, then finishes.
Shown Stream(const std::string& text, size_t step, bool complete,
             std::vector<std::string> stops = {},
             const CompletionView::ToolCallCheck& check = nullptr) {
  CompletionView view(chat::ThinkingMode::kThinking, std::move(stops));
  Shown shown;
  for (size_t n = step; n < text.size() + step && !view.stopped(); n += step) {
    CompletionDelta d = view.Update(std::string_view(text).substr(0, std::min(n, text.size())));
    shown.reasoning += d.reasoning;
    shown.content += d.content;
  }
  shown.end = view.Finish(text, complete && !view.stopped(), check);
  shown.reasoning += shown.end.delta.reasoning;
  shown.content += shown.end.delta.content;
  EXPECT_EQ(shown.reasoning, view.reasoning());
  EXPECT_EQ(shown.content, view.content());
  return shown;
}

TEST(CompletionViewTest, StreamedPiecesJoinToTheParsedMessageAtEveryCut) {
  const std::vector<std::string> completions = {
      "let me think" + kClose + "The answer is 4." + kEos,
      "read it" + kClose + "Reading." + ToolCallText(),
      "read it" + kClose + ToolCallText() + kEos,
      kClose + "héllo wörld ✓" + kEos,
  };
  for (const std::string& text : completions) {
    auto parsed = chat::ParseCompletion(text, chat::ThinkingMode::kThinking);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << text;
    for (size_t step : {1, 2, 3, 7, 1000}) {
      Shown shown = Stream(text, step, /*complete=*/true);
      EXPECT_EQ(shown.reasoning, parsed->reasoning_content) << step << " " << text;
      EXPECT_EQ(shown.content, parsed->content) << step << " " << text;
      EXPECT_FALSE(shown.end.format_error);
      ASSERT_EQ(shown.end.tool_calls.size(), parsed->tool_calls.size());
      for (size_t i = 0; i < parsed->tool_calls.size(); ++i) {
        EXPECT_EQ(shown.end.tool_calls[i].name, parsed->tool_calls[i].name);
        EXPECT_EQ(shown.end.tool_calls[i].arguments, parsed->tool_calls[i].arguments);
      }
    }
  }
}

TEST(CompletionViewTest, NeverShowsThePieceOfAMarkerOrAHalfCharacter) {
  CompletionView view(chat::ThinkingMode::kThinking);
  EXPECT_EQ(view.Update("abc</th").reasoning, "abc");
  EXPECT_EQ(view.Update("abc</think>x\n\n<").content, "x");
  EXPECT_EQ(view.Update("abc</think>x\n\n<" + kDsml.substr(0, 2)).content, "");
  const std::string check = "✓";  // three bytes
  CompletionView utf8(chat::ThinkingMode::kThinking);
  EXPECT_EQ(utf8.Update("a" + check.substr(0, 2)).reasoning, "a");
  EXPECT_EQ(utf8.Update("a" + check).reasoning, check);
}

TEST(CompletionViewTest, AMalformedCallReachesTheClientAsPlainText) {
  const std::string broken = "hm" + kClose + "Calling." + "\n\n<" + kDsml + "tool_calls>\n<" +
                             kDsml + "invoke nam=\"x\">\n</" + kDsml + "invoke>\n</" + kDsml +
                             "tool_calls>" + kEos;
  ASSERT_FALSE(chat::ParseCompletion(broken, chat::ThinkingMode::kThinking).ok());
  for (size_t step : {1, 5, 1000}) {
    Shown shown = Stream(broken, step, /*complete=*/true);
    EXPECT_TRUE(shown.end.format_error);
    EXPECT_FALSE(shown.end.parse_error.empty());
    EXPECT_TRUE(shown.end.tool_calls.empty());
    EXPECT_EQ(shown.reasoning, "hm");
    // Everything after the reasoning, less the end of sentence.
    EXPECT_EQ(shown.content,
              broken.substr(2 + kClose.size(), broken.size() - 2 - kClose.size() - kEos.size()));
  }
}

// A call that parses but that the check refuses (a tool not offered,
// arguments against the schema) is shown as plain text too.
TEST(CompletionViewTest, ACallTheCheckRefusesReachesTheClientAsPlainText) {
  const std::string text = "hm" + kClose + "Calling." + ToolCallText() + kEos;
  int checked = 0;
  auto refuse = [&](const std::vector<chat::ToolCall>& calls) {
    ++checked;
    EXPECT_EQ(calls.size(), 1u);
    return absl::InvalidArgumentError("read: arguments.path: must be an integer");
  };
  for (size_t step : {1, 7, 1000}) {
    Shown shown = Stream(text, step, /*complete=*/true, {}, refuse);
    EXPECT_TRUE(shown.end.format_error);
    EXPECT_EQ(shown.end.parse_error, "read: arguments.path: must be an integer");
    EXPECT_TRUE(shown.end.tool_calls.empty());
    EXPECT_EQ(shown.reasoning, "hm");
    EXPECT_EQ(shown.content, "Calling." + ToolCallText());
  }
  EXPECT_EQ(checked, 3);
  Shown accepted = Stream(text, 3, true, {}, [](const auto&) { return absl::OkStatus(); });
  EXPECT_FALSE(accepted.end.format_error);
  ASSERT_EQ(accepted.end.tool_calls.size(), 1u);
  EXPECT_EQ(accepted.content, "Calling.");
}

TEST(CompletionViewTest, ACutCompletionIsShownAsItIs) {
  Shown reasoning_only = Stream("still thinking </th", 3, /*complete=*/false);
  EXPECT_EQ(reasoning_only.reasoning, "still thinking </th");
  EXPECT_EQ(reasoning_only.content, "");
  Shown half_answer = Stream("done" + kClose + "The ans", 4, /*complete=*/false);
  EXPECT_EQ(half_answer.reasoning, "done");
  EXPECT_EQ(half_answer.content, "The ans");
  EXPECT_FALSE(half_answer.end.format_error);
}

TEST(CompletionViewTest, ContentEndsBeforeTheFirstStopString) {
  const std::string text = "r" + kClose + "one\nSTOP two" + kEos;
  for (size_t step : {1, 2, 1000}) {
    Shown shown = Stream(text, step, /*complete=*/true, {"STOP", "two"});
    EXPECT_EQ(shown.content, "one\n") << step;
  }
  CompletionView view(chat::ThinkingMode::kThinking, {"STOP"});
  EXPECT_EQ(view.Update("r" + kClose + "one ST").content, "one ");
  EXPECT_FALSE(view.stopped());
  EXPECT_EQ(view.Update("r" + kClose + "one STOP").content, "");
  EXPECT_TRUE(view.stopped());
}

}  // namespace
}  // namespace loom::serve
