#pragma once
// The OpenAI Chat Completions dialect (POST /v1/chat/completions), as Pi and
// OpenCode speak it: a request body becomes a TurnRequest, and a turn's
// result becomes a `chat.completion` object or a stream of
// `chat.completion.chunk` events.
//
// Supported: content as a string or text parts; tools / tool_calls / tool
// messages; reasoning_effort; max_tokens / max_completion_tokens; stop;
// temperature / top_p; stream with stream_options.include_usage;
// response_format (json_schema / json_object, rendered by the chat format).
// Refused, because they would change what is generated: n > 1, a
// tool_choice other than "auto", non-zero presence / frequency penalties,
// logit_bias, non-text content parts. Other fields (metadata, user, store,
// seed, parallel_tool_calls, logprobs, cache hints) are ignored.
// Stateless functions; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/message.h"
#include "loom/serve/completion_view.h"
#include "loom/serve/turn.h"

namespace loom::serve {

struct ChatCompletionsRequest {
  TurnRequest turn;
  std::string model;           // echoed back
  bool include_usage = false;  // stream_options.include_usage
};

// INVALID_ARGUMENT naming the field ("messages[1].content[0].type: ...").
absl::StatusOr<ChatCompletionsRequest> ParseChatCompletionsRequest(std::string_view body);

// `{"error": {"message", "type", "param", "code"}}`.
std::string ChatCompletionsError(const ApiError& error);

// Identity of one response: the same in every chunk of a stream.
struct ChatCompletionsId {
  std::string id;  // "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

struct TurnUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// The whole response. `finish_reason`: "stop", "length" or "tool_calls".
chat::OrderedJson ChatCompletionJson(const ChatCompletionsId& id, const std::string& reasoning,
                                     const std::string& content,
                                     const std::vector<chat::ToolCall>& tool_calls,
                                     const std::string& finish_reason, const TurnUsage& usage);

// One `data: {...}\n\n` event of a stream. The first carries the role; a
// delta may carry reasoning_content, content or tool_calls; the last before
// [DONE] the finish reason (and, in its own event, the usage).
std::string ChatChunkEvent(const ChatCompletionsId& id, const chat::OrderedJson& delta,
                           const chat::OrderedJson& finish_reason);
std::string ChatUsageEvent(const ChatCompletionsId& id, const TurnUsage& usage);
chat::OrderedJson ChatDelta(const CompletionDelta& delta);
chat::OrderedJson ChatToolCallsDelta(const std::vector<chat::ToolCall>& tool_calls);
inline constexpr std::string_view kChatDoneEvent = "data: [DONE]\n\n";

}  // namespace loom::serve
