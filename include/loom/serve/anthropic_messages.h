#pragma once
// The Anthropic Messages dialect (POST /v1/messages and
// /v1/messages/count_tokens), as Claude Code speaks it: a request body
// becomes a TurnRequest in the chat format's OpenAI-style messages, and a
// turn's result becomes a `message` object or its stream of events.
//
// Request → messages:
//   system (a string or text blocks)      → a system message first;
//   a user turn's text blocks             → a user message;
//   its tool_result blocks                → tool messages, in order;
//   an assistant turn's thinking blocks   → its reasoning_content;
//   its text and tool_use blocks          → its content and tool_calls
//                                            (input as JSON arguments);
//   a "system" turn inside messages       → a system message there;
//   tools {name, description, input_schema} → function tools.
// A system text block that starts with "x-anthropic-billing-header:" is
// client metadata, not prompt, and is left out (Claude Code changes it
// between the requests of one conversation). output_config.effort is the
// effort name; thinking.type "disabled" renders the format's chat mode,
// anything else its thinking mode, and thinking.display "omitted" leaves the
// thinking blocks out of the response (the model still reasons).
// Refused, because they would change what is generated: top_k, a tool_choice
// other than auto, server tools (a tool with a type other than "custom"),
// image and document blocks. Other fields (metadata, cache_control,
// context_management, service_tier, thinking.budget_tokens) are ignored.
//
// Response: content blocks thinking, text and tool_use in that order;
// stop_reason end_turn, max_tokens, stop_sequence or tool_use. The stream is
// message_start, then each block's content_block_start, deltas
// (thinking_delta and signature_delta, text_delta, input_json_delta) and
// content_block_stop, then message_delta with the stop reason and usage, and
// message_stop. Errors are `{"type": "error", "error": {"type", "message"}}`.
// Functions are stateless; a MessagesStream belongs to one response.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"
#include "loom/serve/completion_view.h"
#include "loom/serve/turn.h"

namespace loom::serve {

struct MessagesRequest {
  TurnRequest turn;
  std::string model;           // echoed back
  bool omit_thinking = false;  // thinking.display "omitted"
};

// `count_tokens`: the body of /v1/messages/count_tokens, where max_tokens is
// not required. INVALID_ARGUMENT naming the field ("messages[1].content[0].type: ...").
absl::StatusOr<MessagesRequest> ParseMessagesRequest(std::string_view body,
                                                     bool count_tokens = false);

// `{"type": "error", "error": {"type", "message"}}`; the type follows the
// status (invalid_request_error, authentication_error, not_found_error,
// request_too_large, api_error).
std::string MessagesError(const ApiError& error);

struct MessagesTurn {
  std::string id;  // "msg_..."
  std::string model;
  std::string reasoning;  // "" when omitted
  std::string content;
  std::vector<chat::ToolCall> tool_calls;
  std::string stop_reason;    // end_turn, max_tokens, stop_sequence, tool_use
  std::string stop_sequence;  // the stop string that ended it, for stop_sequence
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
};

// The whole response.
chat::OrderedJson MessageJson(const MessagesTurn& turn);

// Writes one response's stream of events as the turn's text arrives. Blocks
// open and close in order: thinking, then text; tool_use blocks at the end.
class MessagesStream {
 public:
  MessagesStream(std::string id, std::string model, bool omit_thinking)
      : id_(std::move(id)), model_(std::move(model)), omit_thinking_(omit_thinking) {}

  // message_start (once; `input_tokens` as known now) and the events of `delta`.
  std::string Delta(const CompletionDelta& delta, int64_t input_tokens);
  // Closes the open block, writes the tool_use blocks, message_delta and message_stop.
  std::string Finish(const MessagesTurn& turn);
  // An `error` event, for a turn that failed after the stream began.
  static std::string Error(const ApiError& error);

 private:
  enum class Block { kNone, kThinking, kText };
  std::string Start(int64_t input_tokens);
  std::string Open(Block block);
  std::string Close();

  std::string id_;
  std::string model_;
  bool omit_thinking_;
  bool started_ = false;
  Block open_ = Block::kNone;
  int index_ = 0;  // the next block's index
};

}  // namespace loom::serve
