#pragma once
// The OpenAI Responses dialect (POST /v1/responses), as Codex speaks it: a
// request body becomes a TurnRequest in the chat format's messages, and a
// turn's result becomes a `response` object or its stream of events.
//
// Request → messages:
//   instructions                        → a system message first;
//   a message item (role system, developer, user or assistant; content a
//     string or input_text / output_text parts) → that message;
//   a reasoning item (its content's reasoning_text, else its summary) →
//     the reasoning of the assistant message it precedes;
//   a function_call item                → a tool call of that assistant message;
//   a function_call_output item         → a tool message;
//   function tools                      → function tools.
// Tools of other types (web_search, which needs a network the sandbox does
// not have, and Codex's multi-agent `namespace` tools) are left out of the
// prompt. reasoning.effort is the effort name; text.format json_schema and
// json_object render the format's response format. Refused, because they
// would change what is generated: previous_response_id (loom stores no
// responses; send the whole input), a tool_choice other than "auto", and
// input items or parts of other types (images, files). Other fields (store,
// include, prompt_cache_key, client_metadata, parallel_tool_calls,
// reasoning.summary, truncation) are ignored.
//
// Response: output items reasoning, message and function_call in that
// order; status "completed", or "incomplete" with reason max_output_tokens.
// The stream is response.created and response.in_progress, then per item
// output_item.added, its deltas (reasoning_text, output_text with
// content_part events, function_call_arguments) and output_item.done, then
// response.completed or response.incomplete. Every event carries its
// sequence_number. Errors have the OpenAI shape (ChatCompletionsError).
// Functions are stateless; a ResponsesStream belongs to one response.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/message.h"
#include "loom/serve/completion_view.h"
#include "loom/serve/turn.h"

namespace loom::serve {

struct ResponsesRequest {
  TurnRequest turn;
  std::string model;  // echoed back
};

// INVALID_ARGUMENT naming the field ("input[3].content[0].type: ...").
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body);

struct ResponsesTurn {
  std::string id;  // "resp_..."
  int64_t created_at = 0;
  std::string model;
  std::string reasoning;
  std::string content;
  std::vector<chat::ToolCall> tool_calls;  // call ids as the harness will send them back
  bool incomplete = false;                 // cut at max_output_tokens or the context
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
};

// The whole response.
chat::OrderedJson ResponseJson(const ResponsesTurn& turn);

// Writes one response's stream of events as the turn's text arrives: the
// reasoning item, then the message item, then function_call items at the end.
class ResponsesStream {
 public:
  explicit ResponsesStream(ResponsesTurn header) : header_(std::move(header)) {}

  // response.created and response.in_progress.
  std::string Start();
  // The events of new reasoning or content.
  std::string Delta(const CompletionDelta& delta);
  // Closes the open item, writes the function calls and response.completed
  // (or response.incomplete).
  std::string Finish(const ResponsesTurn& turn);
  // A response.failed event, for a turn that failed after the stream began.
  std::string Failed(const std::string& message);

 private:
  enum class Item { kNone, kReasoning, kMessage };
  std::string Event(const char* type, chat::OrderedJson data);
  std::string Open(Item item);
  std::string Close();

  ResponsesTurn header_;  // id, created_at and model of every event's response
  Item open_ = Item::kNone;
  int output_index_ = 0;  // the next item's index
  std::string text_;      // the open item's text so far
  int64_t sequence_ = 0;  // the next event's sequence_number
};

}  // namespace loom::serve
