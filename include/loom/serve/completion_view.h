#pragma once
// CompletionView: what a client is shown of a DeepSeek-V4 completion while it
// is generated (shared/dsv4-format.md, "Parsing"). The completion's text grows
// token by token; Update() returns the reasoning and content that are new
// since the last call, holding back a tail that could still turn into
// `</think>`, the tool-call block or EOS. Finish() returns the rest, and the
// tool calls. Content also ends at the first of the request's stop strings,
// which is never shown (stopped() then tells the caller to end the turn).
//
// Streamed and whole responses agree: the deltas of all calls, joined, are
// exactly the reasoning and content of Finish()'s message. A completion that
// does not parse (a malformed tool call) ends with its text after the
// reasoning as plain content and `format_error` set; a cut one (max tokens)
// ends with whatever it had, unparsed. Not thread-safe.

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"

namespace loom::serve {

struct CompletionDelta {
  std::string reasoning;
  std::string content;
};

struct CompletionEnd {
  CompletionDelta delta;                   // the text not yet shown
  std::vector<chat::ToolCall> tool_calls;  // ids empty
  bool format_error = false;               // `complete` but not parseable
  std::string parse_error;                 // why, when format_error
};

class CompletionView {
 public:
  CompletionView(chat::ThinkingMode mode, std::vector<std::string> stops = {})
      : mode_(mode), stops_(std::move(stops)) {}

  // `text`: the whole completion so far (each call extends the previous one).
  CompletionDelta Update(std::string_view text);
  // `text`: the whole completion. `complete`: it ended as the format ends a
  // turn (EOS or the end of a tool-call block), so it is parsed; otherwise it
  // was cut short and is shown as it is. `check`, when given, judges the
  // parsed tool calls (tool_schema.h): a call it refuses makes the completion
  // a format error, shown as plain text like one that does not parse.
  using ToolCallCheck = std::function<absl::Status(const std::vector<chat::ToolCall>&)>;
  CompletionEnd Finish(std::string_view text, bool complete, const ToolCallCheck& check = nullptr);

  // The content reached a stop string: the turn is over (Finish with
  // complete = false shows the content before it).
  bool stopped() const { return stopped_; }
  // The stop string that ended the content, when stopped().
  const std::string& stop_sequence() const { return stop_sequence_; }
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }

 private:
  // The reasoning and content of `text` that can no longer change.
  void Visible(std::string_view text, bool final, std::string* reasoning, std::string* content);
  // The end of the content in `rest` (the text after the reasoning).
  size_t ContentEnd(std::string_view rest, bool final);
  CompletionDelta Advance(const std::string& reasoning, const std::string& content);

  chat::ThinkingMode mode_;
  std::vector<std::string> stops_;
  bool stopped_ = false;
  std::string stop_sequence_;
  std::string reasoning_;  // shown so far
  std::string content_;    // shown so far
};

}  // namespace loom::serve
