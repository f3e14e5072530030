#pragma once
// Endpoint: the HTTP side of loom's model endpoint. It checks the API key,
// routes a request to its dialect, renders the conversation in the model's
// chat format, generates the turn on a TurnRunner (streamed or whole) and
// answers in the dialect's shape. Routes: GET /v1/models, POST
// /v1/chat/completions (OpenAI Chat Completions), POST /v1/responses (OpenAI
// Responses), POST /v1/messages and
// /v1/messages/count_tokens (Anthropic Messages; query parameters such as
// ?beta=true are ignored).
//
// Token-in/token-out: a turn that ends at the end of a message leaves its
// conversation held (ConversationStore): its sample keeps the tokens as
// generated, with their KV. A later request whose history extends it
// continues that sample with only the new messages' tokens appended; any
// other request starts a new sample. Earlier reasoning stays in the prompt
// (the format's drop_thinking is off), so a conversation's tokens only ever
// grow; a harness that leaves the reasoning out of the history it re-sends
// still matches.
//
// Every request is answered: a malformed one with a 4xx in its dialect's
// error shape naming the field, an unauthenticated one with 401. A client
// that hangs up cancels its turn, so no engine slot outlives its request.
//
// Threads: Handle() runs concurrently on the HTTP server's connection
// threads. The tokenizer and runner are borrowed and must outlive it.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/special_tokens.h"
#include "loom/serve/completion_view.h"
#include "loom/serve/conversation_store.h"
#include "loom/serve/http.h"
#include "loom/serve/turn.h"
#include "loom/serve/turn_runner.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::serve {

struct EndpointOptions {
  std::string model_name = "loom";  // what /v1/models lists and responses name
  std::string api_key;              // required of every request; "" = none required
  std::string default_effort;       // an effort name for requests that give none; "" = none
  EffortNames effort_names;
  int64_t context_window = 0;  // tokens of prompt plus completion (the model's positions)
  size_t max_held = 64;        // conversations held between requests (least recently used go)
};

// How a turn ended, as every dialect reports it.
struct TurnOutcome {
  std::string reasoning;
  std::string content;
  std::vector<chat::ToolCall> tool_calls;  // ids "call_<turn>_<i>"
  enum class Finish { kStop, kLength, kToolCalls, kCancelled } finish = Finish::kStop;
  bool format_error = false;  // it did not parse or called a tool wrongly; its text is the content
  int64_t prompt_tokens = 0;  // the whole context the turn generated after
  int64_t completion_tokens = 0;
  bool held = false;  // its sample waits in the engine for the conversation's next turn
  bool ended_with_eos = false;
  std::string stop_sequence;  // the request's stop string that ended the content, if one did
  absl::Status status;        // a turn the engine refused or a model failure
};

class Endpoint {
 public:
  // INVALID_ARGUMENT when the tokenizer lacks the chat format's special
  // tokens or the default effort is not a known name.
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(const tokenizer::Tokenizer& tokenizer,
                                                          TurnRunner& runner,
                                                          EndpointOptions options);

  void Handle(const HttpRequest& request, HttpResponder& out);

  // Totals since start, for tests and metrics.
  int64_t turns() const { return turns_.load(); }
  int64_t format_errors() const { return format_errors_.load(); }

 private:
  Endpoint(const tokenizer::Tokenizer& tokenizer, TurnRunner& runner, EndpointOptions options,
           chat::SpecialTokenIds special, std::vector<int64_t> tool_calls_end);

  class Reply;
  class ChatCompletionsReply;
  class MessagesReply;
  class ResponsesReply;

  bool Authorized(const HttpRequest& request) const;
  void ChatCompletions(const HttpRequest& request, HttpResponder& out);
  void Responses(const HttpRequest& request, HttpResponder& out);
  void Messages(const HttpRequest& request, HttpResponder& out);
  void CountTokens(const HttpRequest& request, HttpResponder& out);
  // Generates `turn` and answers it in `reply`'s dialect, whole or streamed.
  void Serve(const TurnRequest& turn, Reply& reply, HttpResponder& out);
  // The prompt's encoding: its effort line (the request's name, or the
  // default) and thinking mode. INVALID_ARGUMENT naming the effort field.
  absl::StatusOr<chat::EncodeOptions> EncodeFor(const TurnRequest& turn) const;
  // The request's effort name, or the server's default.
  const std::string& EffortName(const TurnRequest& turn) const;
  // A turn being generated, and how it began.
  struct Started {
    std::shared_ptr<TurnRunner::Turn> turn;
    TurnSettings settings;
    int64_t appended = -1;  // tokens appended to a held conversation; -1 for a new one
  };
  // Renders `turn` and starts generating it: on a held conversation it
  // extends, or on a new sample.
  absl::StatusOr<Started> Begin(const TurnRequest& turn, ApiError* error);
  std::optional<Started> Continue(const TurnRequest& turn, const TurnSettings& settings,
                                  const chat::EncodeOptions& encode);
  // After the turn: holds its conversation for the next request, or lets
  // its sample go.
  void Keep(const TurnRequest& request, const Started& started, const TurnOutcome& outcome);
  // The turn ended as the format ends a message (EOS or a tool-call block).
  bool EndsCleanly(const std::vector<int64_t>& tokens) const;
  // Follows the turn to its end, passing each new piece of text and the
  // prompt's length so far to `on_delta` (false: the client is gone, and the
  // turn is cancelled).
  TurnOutcome Follow(const Started& started, const TurnRequest& request, HttpResponder& out,
                     const std::function<bool(const CompletionDelta&, int64_t)>& on_delta);

  const tokenizer::Tokenizer& tokenizer_;
  TurnRunner& runner_;
  EndpointOptions options_;
  chat::SpecialTokenIds special_;
  std::vector<int64_t> tool_calls_end_;
  ConversationStore store_;
  std::atomic<int64_t> turns_{0};
  std::atomic<int64_t> format_errors_{0};
};

}  // namespace loom::serve
