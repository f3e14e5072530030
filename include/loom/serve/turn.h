#pragma once
// What every wire dialect of the model endpoint asks of the model — one
// assistant turn — and the table that turns a dialect's effort names into the
// `Reasoning Effort:` line of the prompt. Plain values; thread-safe.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"

namespace loom::serve {

// A refusal, which each dialect writes in its own error shape.
struct ApiError {
  int status = 400;
  std::string message;  // names the field when one is at fault: "messages[2].content: ..."
  std::string code;     // a machine-readable reason ("context_length_exceeded"), or ""
};

// INVALID_ARGUMENT as a 400, OUT_OF_RANGE (a conversation that outgrew the
// context) as a 400 context_length_exceeded, any other status as a 500.
ApiError ErrorFromStatus(const absl::Status& status);

struct TurnRequest {
  std::vector<chat::Message> messages;  // the conversation; its tools on the first message
  std::string effort;                   // the request's effort name; "" = the server's default
  std::string effort_field;             // where the dialect carries it, for errors
  int64_t max_tokens = 0;               // generated tokens at most; 0 = to the context limit
  std::vector<std::string> stop;        // content ends before the first of these
  double temperature = 1.0;             // 0 = greedy
  double top_p = 1.0;
  chat::ThinkingMode thinking = chat::ThinkingMode::kThinking;
  bool stream = false;
};

// The chat format renders system text only at the start of a conversation:
// after a user turn, a system message would leave the prompt without the
// assistant's opening. A system message after the first non-system one (as
// Claude Code sends its environment, or a Chat Completions client its late
// instructions) becomes a developer message, which the format renders as a
// user-side turn.
void PlaceLateSystemMessages(std::vector<chat::Message>* messages);

// Effort names and the effort each one renders. The defaults keep the source
// report's tiers (low / high / max = 50 / 75 / 100) and give OpenAI's and
// Anthropic's other names a place between them:
//   none: no line, minimal 25, low 50, medium 62, high 75, xhigh 88, max 100.
// A number 1..100 is its own effort; "v4-max" and "v4-high" are the format's
// literal modes (chat::ParseReasoningEffort).
class EffortNames {
 public:
  EffortNames();
  // `spec`: "name=value,..." (value as ParseReasoningEffort reads it), on top
  // of the defaults. INVALID_ARGUMENT naming the bad entry.
  static absl::StatusOr<EffortNames> WithOverrides(std::string_view spec);
  // INVALID_ARGUMENT naming the known names for an unknown one.
  absl::StatusOr<chat::ReasoningEffort> Lookup(std::string_view name) const;

 private:
  std::map<std::string, chat::ReasoningEffort, std::less<>> names_;
};

}  // namespace loom::serve
