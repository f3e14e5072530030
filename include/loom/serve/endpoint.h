#pragma once
// Endpoint: the HTTP side of loom's model endpoint. It checks the API key,
// routes a request to its dialect, renders the conversation in the model's
// chat format, generates the turn on a TurnRunner (streamed or whole) and
// answers in the dialect's shape. Routes: GET /v1/models and POST
// /v1/chat/completions.
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
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/special_tokens.h"
#include "loom/serve/completion_view.h"
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
};

// How a turn ended, as every dialect reports it.
struct TurnOutcome {
  std::string reasoning;
  std::string content;
  std::vector<chat::ToolCall> tool_calls;  // ids "call_<turn>_<i>"
  enum class Finish { kStop, kLength, kToolCalls, kCancelled } finish = Finish::kStop;
  bool format_error = false;  // the completion did not parse; its text is the content
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  absl::Status status;  // a turn the engine refused or a model failure
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

  bool Authorized(const HttpRequest& request) const;
  void ChatCompletions(const HttpRequest& request, HttpResponder& out);
  // Renders `turn` and starts generating it.
  absl::StatusOr<std::shared_ptr<TurnRunner::Turn>> Begin(const TurnRequest& turn, ApiError* error);
  // Follows the turn to its end, passing each new piece of text to `on_delta`
  // (false: the client is gone, and the turn is cancelled).
  TurnOutcome Follow(TurnRunner::Turn& turn, const TurnRequest& request, HttpResponder& out,
                     const std::function<bool(const CompletionDelta&)>& on_delta);

  const tokenizer::Tokenizer& tokenizer_;
  TurnRunner& runner_;
  EndpointOptions options_;
  chat::SpecialTokenIds special_;
  std::vector<int64_t> tool_calls_end_;
  std::atomic<int64_t> turns_{0};
  std::atomic<int64_t> format_errors_{0};
};

}  // namespace loom::serve
