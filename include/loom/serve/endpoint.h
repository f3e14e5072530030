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
// Sessions: a harness session (OpenSession) has its own API key, its own
// held conversations and, when it closes, its record: every engine sample it
// generated on (a segment: one training sequence with its loss mask, the
// behaviour log-prob and policy version of each generated token) and every
// call with its segment and times. Each generated token is in exactly one
// segment: a request that continues a held conversation appends to its
// segment, any other opens a new one whose earlier turns are prompt (loss
// mask 0). Requests with no session key go to the server's own session
// (options.api_key), which keeps no record.
//
// Every request is answered: a malformed one with a 4xx in its dialect's
// error shape naming the field, an unauthenticated one with 401. A client
// that hangs up cancels its turn, so no engine slot outlives its request.
//
// Threads: Handle() runs concurrently on the HTTP server's connection
// threads. The tokenizer and runner are borrowed and must outlive it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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

// A harness session of the endpoint.
struct SessionOptions {
  std::string key;     // its API key, required of its requests: at least 16 characters
  std::string effort;  // an effort name every turn renders, whatever the harness asks
                       // (training: the sample's own effort wins); "" = the harness's
  // The sampling temperature of every turn, whatever the harness asks (the
  // trainer's rollout temperature); none = the harness's.
  std::optional<double> temperature;
  // Tokens a turn generates at most, whatever the harness asks (the
  // trainer's per-turn cap); 0 = the harness's max_tokens.
  int64_t max_turn_tokens = 0;
};

// A tool result a harness sent back, as a call's request carried it.
struct ToolResultRecord {
  std::string call_id;  // the tool call it answers ("call_<turn>_<i>")
  int64_t bytes = 0;    // its whole content's
  std::string head;     // its first kToolResultHead bytes
};
inline constexpr size_t kToolResultHead = 1000;

// One call of a session, for its trajectory.
struct CallRecord {
  int64_t segment = -1;           // the SessionRecord::segments entry it generated on; -1: none
  bool continued = false;         // it appended to its segment (else it began it)
  int64_t context = 0;            // the segment's tokens before the call generated
  int64_t completion_tokens = 0;  // tokens it generated
  double start_s = 0;             // since the session opened
  double end_s = 0;
  std::string finish;  // stop, length, tool_calls, cancelled or failed
  bool format_error = false;
  std::vector<chat::ToolCall> tool_calls;  // the tools it asked the harness to run
  // The tool results its request brought (the run of them that ends the
  // conversation it was sent): what the harness's tools gave back.
  std::vector<ToolResultRecord> tool_results;
};

// What a closed session leaves for training.
struct SessionRecord {
  std::vector<rollout::SampleState> segments;  // in the order begun
  std::vector<CallRecord> calls;               // in the order they ended
  int64_t lost_segments = 0;  // begun, and not ended by the close's wait (or refused)
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

  // Serves a request of any session whose key it bears, or else of the
  // server's own session.
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  void Handle(const HttpRequest& request, HttpResponder& out);
  // Serves a request only as session `key`'s: any other key gets 401.
  void HandleSession(const std::string& key, const HttpRequest& request, HttpResponder& out);

  // INVALID_ARGUMENT for a short key or an unknown effort name,
  // ALREADY_EXISTS for a key in use.
  absl::Status OpenSession(SessionOptions options);
  // Ends session `key`: later requests with its key get 401, its turns
  // still running are cancelled, its held conversations released; waits up
  // to `wait` for its segments. NOT_FOUND for an unknown key.
  absl::StatusOr<SessionRecord> CloseSession(const std::string& key,
                                             std::chrono::milliseconds wait);

  // Totals since start, for tests and metrics.
  int64_t turns() const { return turns_.load(); }
  int64_t format_errors() const { return format_errors_.load(); }

 private:
  Endpoint(const tokenizer::Tokenizer& tokenizer, TurnRunner& runner, EndpointOptions options,
           chat::SpecialTokenIds special, std::vector<int64_t> tool_calls_end);

  struct Session;
  class Reply;
  class ChatCompletionsReply;
  class MessagesReply;
  class ResponsesReply;

  // The session whose key `request` bears (the server's own when it
  // requires no key and the request names no session); null: none.
  std::shared_ptr<Session> SessionOf(const HttpRequest& request) const;
  void Route(const HttpRequest& request, Session* session, HttpResponder& out);
  void ChatCompletions(const HttpRequest& request, Session& session, HttpResponder& out);
  void Responses(const HttpRequest& request, Session& session, HttpResponder& out);
  void Messages(const HttpRequest& request, Session& session, HttpResponder& out);
  void CountTokens(const HttpRequest& request, Session& session, HttpResponder& out);
  // Generates `turn` and answers it in `reply`'s dialect, whole or streamed.
  void Serve(const TurnRequest& turn, Session& session, Reply& reply, HttpResponder& out);
  // The prompt's encoding: its effort line and thinking mode.
  // INVALID_ARGUMENT naming the effort field.
  absl::StatusOr<chat::EncodeOptions> EncodeFor(const TurnRequest& turn,
                                                const Session& session) const;
  // The session's effort name, else the request's, else the server's default.
  const std::string& EffortName(const TurnRequest& turn, const Session& session) const;
  // A turn being generated, and how it began.
  struct Started {
    std::shared_ptr<TurnRunner::Turn> turn;
    TurnSettings settings;
    int64_t appended = -1;  // tokens appended to a held conversation; -1 for a new one
  };
  // Renders `turn` and starts generating it: on a held conversation it
  // extends, or on a new sample.
  absl::StatusOr<Started> Begin(const TurnRequest& turn, Session& session, ApiError* error);
  std::optional<Started> Continue(const TurnRequest& turn, Session& session,
                                  const TurnSettings& settings, const chat::EncodeOptions& encode);
  // After the turn: records it, and holds its conversation for the next
  // request or lets its sample go.
  void Keep(const TurnRequest& request, Session& session, const Started& started,
            const TurnOutcome& outcome, std::chrono::steady_clock::time_point start);
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
  std::shared_ptr<Session> own_;  // the server's session (options.api_key)
  mutable std::mutex sessions_mu_;
  std::vector<std::shared_ptr<Session>> sessions_;  // harness sessions; guarded by sessions_mu_
  std::atomic<int64_t> turns_{0};
  std::atomic<int64_t> format_errors_{0};
};

}  // namespace loom::serve
