#include "loom/serve/endpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/serve/anthropic_messages.h"
#include "loom/serve/chat_completions.h"
#include "loom/serve/json_body.h"
#include "loom/serve/openai_responses.h"
#include "loom/serve/tool_schema.h"

namespace loom::serve {
namespace {

using chat::OrderedJson;
constexpr std::string_view kJson = "application/json";

// Compares without an early exit, so the time taken says nothing about the key.
bool SameSecret(std::string_view given, std::string_view key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  }
  return diff == 0;
}

const char* FinishReason(TurnOutcome::Finish finish) {
  switch (finish) {
    case TurnOutcome::Finish::kLength:
      return "length";
    case TurnOutcome::Finish::kToolCalls:
      return "tool_calls";
    default:
      return "stop";
  }
}

// One line per turn, as an operator reads a request log.
// `appended`: tokens appended to a held conversation, or -1 for a new one.
void LogTurn(uint64_t turn, const TurnOutcome& outcome, int64_t appended) {
  const char* how = outcome.finish == TurnOutcome::Finish::kCancelled ? "cancelled (client gone)"
                    : !outcome.status.ok()                            ? "failed"
                                           : FinishReason(outcome.finish);
  spdlog::info("turn {}: {} after {} tokens, prompt {}{}{}{}", turn, how, outcome.completion_tokens,
               outcome.prompt_tokens,
               appended >= 0 ? absl::StrCat(" (continued: ", appended, " new)") : " (new)",
               outcome.format_error ? ", malformed completion" : "",
               outcome.status.ok() ? "" : absl::StrCat(": ", outcome.status.message()));
}

bool Empty(const CompletionDelta& delta) {
  return delta.reasoning.empty() && delta.content.empty();
}

const char* CallFinish(const TurnOutcome& outcome) {
  if (outcome.finish == TurnOutcome::Finish::kCancelled) return "cancelled";
  return outcome.status.ok() ? FinishReason(outcome.finish) : "failed";
}

// The API key a request bears: x-api-key (Anthropic) or a bearer token.
std::optional<std::string_view> KeyOf(const HttpRequest& request) {
  if (const std::string* key = request.Header("x-api-key")) return std::string_view(*key);
  const std::string* auth = request.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth == nullptr || auth->compare(0, kBearer.size(), kBearer) != 0) return std::nullopt;
  return std::string_view(*auth).substr(kBearer.size());
}

}  // namespace

struct Endpoint::Session {
  Session(SessionOptions options, size_t max_held, bool record)
      : options(std::move(options)), record(record), store(max_held) {}

  const SessionOptions options;
  const bool record;  // keeps its segments and calls for CloseSession
  ConversationStore store;
  const std::chrono::steady_clock::time_point opened = std::chrono::steady_clock::now();
  std::mutex mu;
  bool closed = false;                                  // guarded by mu
  std::vector<uint64_t> samples;                        // begun, in order; guarded by mu
  std::vector<std::pair<uint64_t, CallRecord>> calls;   // with their samples; guarded by mu
  std::set<std::shared_ptr<TurnRunner::Turn>> running;  // guarded by mu

  double Since(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double>(t - opened).count();
  }
};

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(const tokenizer::Tokenizer& tokenizer,
                                                           TurnRunner& runner,
                                                           EndpointOptions options) {
  auto special = chat::SpecialTokenIds::Resolve(tokenizer);
  if (!special.ok()) return special.status();
  auto tool_calls_end = chat::ToolCallsEndIds(tokenizer);
  if (!tool_calls_end.ok()) return tool_calls_end.status();
  if (!options.default_effort.empty()) {
    auto effort = options.effort_names.Lookup(options.default_effort);
    if (!effort.ok()) return effort.status();
  }
  if (options.context_window < 2) {
    return absl::InvalidArgumentError("the context window must be at least 2 tokens");
  }
  return std::unique_ptr<Endpoint>(
      new Endpoint(tokenizer, runner, std::move(options), *special, *std::move(tool_calls_end)));
}

Endpoint::Endpoint(const tokenizer::Tokenizer& tokenizer, TurnRunner& runner,
                   EndpointOptions options, chat::SpecialTokenIds special,
                   std::vector<int64_t> tool_calls_end)
    : tokenizer_(tokenizer),
      runner_(runner),
      options_(std::move(options)),
      special_(special),
      tool_calls_end_(std::move(tool_calls_end)),
      own_(std::make_shared<Session>(SessionOptions{options_.api_key, "", std::nullopt},
                                     options_.max_held,
                                     /*record=*/false)) {}

Endpoint::~Endpoint() = default;

std::shared_ptr<Endpoint::Session> Endpoint::SessionOf(const HttpRequest& request) const {
  const std::optional<std::string_view> key = KeyOf(request);
  if (key) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (const auto& session : sessions_) {
      if (SameSecret(*key, session->options.key)) return session;
    }
  }
  if (options_.api_key.empty() || (key && SameSecret(*key, options_.api_key))) return own_;
  return nullptr;
}

void Endpoint::Handle(const HttpRequest& request, HttpResponder& out) {
  std::shared_ptr<Session> session = SessionOf(request);
  Route(request, session.get(), out);
}

void Endpoint::HandleSession(const std::string& key, const HttpRequest& request,
                             HttpResponder& out) {
  std::shared_ptr<Session> session = SessionOf(request);
  Route(request, session != nullptr && session->options.key == key ? session.get() : nullptr, out);
}

absl::Status Endpoint::OpenSession(SessionOptions options) {
  if (options.key.size() < 16) {
    return absl::InvalidArgumentError("a session's API key needs at least 16 characters");
  }
  if (options.temperature && !(*options.temperature >= 0)) {
    return absl::InvalidArgumentError("a session's temperature must be at least 0");
  }
  if (!options.effort.empty()) {
    auto effort = options_.effort_names.Lookup(options.effort);
    if (!effort.ok()) return effort.status();
  }
  std::lock_guard<std::mutex> lock(sessions_mu_);
  for (const auto& session : sessions_) {
    if (session->options.key == options.key) {
      return absl::AlreadyExistsError("a session with this API key is open");
    }
  }
  if (options.key == options_.api_key) {
    return absl::AlreadyExistsError("the session's API key is the server's own");
  }
  sessions_.push_back(std::make_shared<Session>(std::move(options), options_.max_held,
                                                /*record=*/true));
  return absl::OkStatus();
}

absl::StatusOr<SessionRecord> Endpoint::CloseSession(const std::string& key,
                                                     std::chrono::milliseconds wait) {
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    auto it = std::find_if(sessions_.begin(), sessions_.end(),
                           [&](const auto& s) { return s->options.key == key; });
    if (it == sessions_.end()) return absl::NotFoundError("no open session has this API key");
    session = *it;
    sessions_.erase(it);
  }
  std::vector<uint64_t> samples;
  {
    std::lock_guard<std::mutex> lock(session->mu);
    session->closed = true;
    for (const auto& turn : session->running) runner_.Cancel(*turn);
    samples = session->samples;
  }
  for (uint64_t sample : session->store.Clear()) runner_.Release(sample);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  SessionRecord record;
  std::map<uint64_t, int64_t> segment_of;
  for (uint64_t sample : samples) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    std::unique_ptr<rollout::SampleState> state =
        runner_.TakeEnded(sample, std::max(left, std::chrono::milliseconds(0)));
    if (state == nullptr) {
      runner_.Forget(sample);  // it may end later: its state would wait forever
      ++record.lost_segments;
      continue;
    }
    segment_of[sample] = static_cast<int64_t>(record.segments.size());
    record.segments.push_back(std::move(*state));
  }
  std::lock_guard<std::mutex> lock(session->mu);  // calls that ended while the segments came
  for (auto& [sample, call] : session->calls) {
    auto it = segment_of.find(sample);
    call.segment = it == segment_of.end() ? -1 : it->second;
    record.calls.push_back(std::move(call));
  }
  return record;
}

void Endpoint::Route(const HttpRequest& request, Session* session, HttpResponder& out) {
  const bool anthropic = absl::StartsWith(request.path, "/v1/messages");
  auto refuse = [&](int status, const std::string& message) {
    const ApiError error{status, message, ""};
    out.Send(status, kJson, anthropic ? MessagesError(error) : ChatCompletionsError(error));
  };
  if (session == nullptr) return refuse(401, "a missing or wrong API key");
  if (request.path == "/v1/models") {
    if (request.method != "GET") return refuse(405, "GET /v1/models");
    OrderedJson model = {
        {"id", options_.model_name},           {"object", "model"}, {"type", "model"},
        {"display_name", options_.model_name}, {"created", 0},      {"owned_by", "loom"}};
    out.Send(200, kJson, DumpJson({{"object", "list"}, {"data", OrderedJson::array({model})}}));
    return;
  }
  using Handler = void (Endpoint::*)(const HttpRequest&, Session&, HttpResponder&);
  static const std::pair<const char*, Handler> kRoutes[] = {
      {"/v1/chat/completions", &Endpoint::ChatCompletions},
      {"/v1/responses", &Endpoint::Responses},
      {"/v1/messages", &Endpoint::Messages},
      {"/v1/messages/count_tokens", &Endpoint::CountTokens},
  };
  for (const auto& [path, route] : kRoutes) {
    if (request.path != path) continue;
    if (request.method != "POST") return refuse(405, absl::StrCat("POST ", path));
    return (this->*route)(request, *session, out);
  }
  refuse(404, absl::StrCat("no route ", request.method, " ", request.path));
}

std::optional<Endpoint::Started> Endpoint::Continue(const TurnRequest& turn, Session& session,
                                                    const TurnSettings& settings,
                                                    const chat::EncodeOptions& encode) {
  std::optional<HeldConversation> held = session.store.Take(turn.messages, settings);
  if (!held) return std::nullopt;
  const std::vector<chat::Message> added(turn.messages.begin() + held->messages.size(),
                                         turn.messages.end());
  auto next = chat::EncodeContinuation(held->messages, added, encode, tokenizer_);
  if (!next.ok()) {  // the earlier prompt would change: a new segment instead
    runner_.Release(held->sample);
    return std::nullopt;
  }
  std::vector<int64_t> ids;
  if (held->needs_eos) ids.push_back(special_.eos);
  ids.insert(ids.end(), next->begin(), next->end());
  Started started{nullptr, settings, static_cast<int64_t>(ids.size())};
  started.turn = runner_.Continue(held->sample, std::move(ids));
  return started;
}

const std::string& Endpoint::EffortName(const TurnRequest& turn, const Session& session) const {
  if (!session.options.effort.empty()) return session.options.effort;
  return turn.effort.empty() ? options_.default_effort : turn.effort;
}

absl::StatusOr<chat::EncodeOptions> Endpoint::EncodeFor(const TurnRequest& turn,
                                                        const Session& session) const {
  chat::EncodeOptions encode;
  encode.drop_thinking = false;  // a conversation's tokens only grow (see the header)
  encode.thinking_mode = turn.thinking;
  const std::string& effort_name = EffortName(turn, session);
  if (!effort_name.empty()) {
    auto effort = options_.effort_names.Lookup(effort_name);
    if (!effort.ok()) return FieldError(turn.effort_field, std::string(effort.status().message()));
    encode.reasoning_effort = *effort;
  }
  return encode;
}

absl::StatusOr<Endpoint::Started> Endpoint::Begin(const TurnRequest& turn, Session& session,
                                                  ApiError* error) {
  auto encode = EncodeFor(turn, session);
  if (!encode.ok()) {
    *error = ErrorFromStatus(encode.status());
    return encode.status();
  }
  ++turns_;
  const double temperature = session.options.temperature.value_or(turn.temperature);
  // The session's cap bounds whatever the harness asks (0: no cap there).
  const int64_t cap = session.options.max_turn_tokens;
  const int64_t max_tokens =
      cap > 0 && (turn.max_tokens == 0 || turn.max_tokens > cap) ? cap : turn.max_tokens;
  const TurnSettings settings{EffortName(turn, session), temperature, turn.top_p, max_tokens,
                              turn.thinking};
  if (std::optional<Started> continued = Continue(turn, session, settings, *encode)) {
    return *continued;
  }
  auto ids = chat::EncodeIds(turn.messages, *encode, tokenizer_);
  if (!ids.ok()) {
    *error = ErrorFromStatus(ids.status());
    return ids.status();
  }
  const int64_t prompt = static_cast<int64_t>(ids->size());
  if (prompt >= options_.context_window) {
    *error = {400,
              absl::StrCat("messages: the prompt is ", prompt, " tokens and the context window is ",
                           options_.context_window),
              "context_length_exceeded"};
    return absl::InvalidArgumentError(error->message);
  }
  rollout::SampleRequest request;
  request.prompt.assign(ids->begin(), ids->end());
  request.sampling.temperature = temperature;
  request.sampling.top_p = turn.top_p;
  // Every turn of the conversation is generated on this sample: a message's
  // end (EOS or a tool-call block) parks it for the next request, the
  // request's max_tokens bounds each turn, the context all of them.
  request.stop.max_new_tokens = options_.context_window;
  request.stop.max_context = options_.context_window;
  request.stop.tool_call_end = {tool_calls_end_, {special_.eos}};
  request.stop.max_turn_tokens = max_tokens;
  std::lock_guard<std::mutex> lock(session.mu);
  if (session.closed) {
    *error = {401, "the session has closed", ""};
    return absl::FailedPreconditionError(error->message);
  }
  Started started{runner_.Begin(std::move(request), session.record), settings, -1};
  if (session.record) session.samples.push_back(started.turn->sample());
  return started;
}

bool Endpoint::EndsCleanly(const std::vector<int64_t>& tokens) const {
  if (!tokens.empty() && tokens.back() == special_.eos) return true;
  return tokens.size() >= tool_calls_end_.size() &&
         std::equal(tool_calls_end_.rbegin(), tool_calls_end_.rend(), tokens.rbegin());
}

TurnOutcome Endpoint::Follow(const Started& started, const TurnRequest& request, HttpResponder& out,
                             const std::function<bool(const CompletionDelta&, int64_t)>& on_delta) {
  TurnRunner::Turn& turn = *started.turn;
  TurnOutcome outcome;
  CompletionView view(request.thinking, request.stop);
  TurnProgress progress;
  std::vector<int64_t> tokens;
  std::string text;  // the decoded tokens: byte-level decoding appends piece by piece
  auto cancel = [&] {
    runner_.Cancel(turn);
    outcome.finish = TurnOutcome::Finish::kCancelled;
    outcome.completion_tokens = static_cast<int64_t>(tokens.size());
    LogTurn(turn.id(), outcome, started.appended);
    return outcome;
  };
  while (!progress.done && !view.stopped()) {
    progress = runner_.Wait(turn, tokens.size(), std::chrono::milliseconds(50));
    outcome.prompt_tokens = progress.context;
    if (!progress.tokens.empty()) {
      tokens.insert(tokens.end(), progress.tokens.begin(), progress.tokens.end());
      auto decoded = tokenizer_.Decode({progress.tokens.begin(), progress.tokens.end()});
      if (decoded.ok()) text += *decoded;
      CompletionDelta delta = view.Update(text);
      if (!Empty(delta) && !on_delta(delta, outcome.prompt_tokens)) return cancel();
    }
    if (!progress.done && out.ClientGone()) return cancel();
  }
  if (view.stopped()) runner_.Cancel(turn);  // the content reached a stop string
  outcome.status = progress.status;
  outcome.completion_tokens = static_cast<int64_t>(tokens.size());
  outcome.held = progress.held && !view.stopped();
  outcome.ended_with_eos = !tokens.empty() && tokens.back() == special_.eos;
  // EOS and a tool-call block both park the sample (its stop rules): the
  // turn ended as a message ends unless max_tokens cut it there.
  const bool clean =
      !view.stopped() && progress.finish == rollout::FinishReason::kToolCall && EndsCleanly(tokens);
  const std::optional<OrderedJson>* tools = nullptr;  // the tools the request offers
  for (const chat::Message& m : request.messages) {
    if (m.tools) {
      tools = &m.tools;
      break;
    }
  }
  CompletionEnd end = view.Finish(text, clean, [&](const std::vector<chat::ToolCall>& calls) {
    return CheckToolCalls(calls, tools != nullptr ? *tools : std::nullopt);
  });
  if (!Empty(end.delta) && !on_delta(end.delta, outcome.prompt_tokens)) return cancel();
  outcome.reasoning = view.reasoning();
  outcome.content = view.content();
  outcome.format_error = end.format_error;
  if (view.stopped()) outcome.stop_sequence = view.stop_sequence();
  if (end.format_error) ++format_errors_;
  for (size_t i = 0; i < end.tool_calls.size(); ++i) {
    end.tool_calls[i].id = absl::StrCat("call_", turn.id(), "_", i);
  }
  outcome.tool_calls = std::move(end.tool_calls);
  if (!outcome.tool_calls.empty()) {
    outcome.finish = TurnOutcome::Finish::kToolCalls;
  } else if (!view.stopped() && !clean) {
    outcome.finish = TurnOutcome::Finish::kLength;  // max tokens, the context, or a turn cut short
  }
  LogTurn(turn.id(), outcome, started.appended);
  return outcome;
}

namespace {

// The tool results that end `messages`: tool messages, or a user message
// made of tool-result blocks, in order.
std::vector<ToolResultRecord> TrailingToolResults(const std::vector<chat::Message>& messages) {
  std::vector<ToolResultRecord> results;
  auto add = [&](const std::string& id, const std::string& content) {
    results.push_back(
        {id, static_cast<int64_t>(content.size()), content.substr(0, kToolResultHead)});
  };
  size_t first = messages.size();
  while (first > 0) {
    const chat::Message& m = messages[first - 1];
    const bool blocks = m.role == chat::Role::kUser && !m.blocks.empty() &&
                        std::all_of(m.blocks.begin(), m.blocks.end(),
                                    [](const chat::ContentBlock& b) { return b.is_tool_result; });
    if (m.role != chat::Role::kTool && !blocks) break;
    --first;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const chat::Message& m = messages[i];
    if (m.role == chat::Role::kTool) {
      add(m.tool_call_id, m.content);
    } else {
      for (const chat::ContentBlock& block : m.blocks) add(block.tool_use_id, block.text);
    }
  }
  return results;
}

}  // namespace

void Endpoint::Keep(const TurnRequest& request, Session& session, const Started& started,
                    const TurnOutcome& outcome, std::chrono::steady_clock::time_point start) {
  const uint64_t sample = started.turn->sample();
  bool closed;
  {
    std::lock_guard<std::mutex> lock(session.mu);
    session.running.erase(started.turn);
    closed = session.closed;
    if (session.record) {
      CallRecord call;
      call.continued = started.appended >= 0;
      call.context = outcome.prompt_tokens;
      call.completion_tokens = outcome.completion_tokens;
      call.start_s = session.Since(start);
      call.end_s = session.Since(std::chrono::steady_clock::now());
      call.finish = CallFinish(outcome);
      call.format_error = outcome.format_error;
      call.tool_calls = outcome.tool_calls;
      call.tool_results = TrailingToolResults(request.messages);
      session.calls.emplace_back(sample, std::move(call));
    }
  }
  if (closed || !outcome.held || outcome.finish == TurnOutcome::Finish::kCancelled ||
      !outcome.status.ok()) {
    runner_.Release(sample);  // nothing if the sample already ended
    return;
  }
  HeldConversation held{request.messages, sample, false, started.settings};
  chat::Message assistant;
  assistant.role = chat::Role::kAssistant;
  assistant.content = outcome.content;
  if (!outcome.reasoning.empty()) assistant.reasoning_content = outcome.reasoning;
  assistant.tool_calls = outcome.tool_calls;
  held.messages.push_back(std::move(assistant));
  held.needs_eos = !outcome.ended_with_eos;
  for (uint64_t evicted : session.store.Put(std::move(held))) runner_.Release(evicted);
}

// How one dialect writes its answer to a turn: whole, or as a stream of
// events. One per request.
class Endpoint::Reply {
 public:
  virtual ~Reply() = default;
  virtual std::string Error(const ApiError& error) const = 0;  // a whole error body
  virtual void Name(uint64_t turn) = 0;                        // before any answer
  virtual std::string Whole(const TurnOutcome& outcome) const = 0;
  virtual std::string Opening() = 0;  // the stream's first events
  virtual std::string Delta(const CompletionDelta& delta, int64_t prompt_tokens) = 0;
  virtual std::string Closing(const TurnOutcome& outcome) = 0;  // the stream's last events
  virtual std::string StreamError(const ApiError& error) = 0;
};

class Endpoint::ChatCompletionsReply final : public Reply {
 public:
  ChatCompletionsReply(std::string model, bool include_usage)
      : id_{"", static_cast<int64_t>(std::time(nullptr)), std::move(model)},
        include_usage_(include_usage) {}
  std::string Error(const ApiError& error) const override { return ChatCompletionsError(error); }
  void Name(uint64_t turn) override { id_.id = absl::StrCat("chatcmpl-", turn); }
  std::string Whole(const TurnOutcome& outcome) const override {
    return DumpJson(ChatCompletionJson(id_, outcome.reasoning, outcome.content, outcome.tool_calls,
                                       FinishReason(outcome.finish),
                                       {outcome.prompt_tokens, outcome.completion_tokens}));
  }
  std::string Opening() override {
    return ChatChunkEvent(id_, {{"role", "assistant"}, {"content", ""}}, nullptr);
  }
  std::string Delta(const CompletionDelta& delta, int64_t) override {
    return ChatChunkEvent(id_, ChatDelta(delta), nullptr);
  }
  std::string Closing(const TurnOutcome& outcome) override {
    std::string events;
    if (!outcome.tool_calls.empty()) {
      events += ChatChunkEvent(id_, ChatToolCallsDelta(outcome.tool_calls), nullptr);
    }
    events += ChatChunkEvent(id_, OrderedJson::object(), FinishReason(outcome.finish));
    if (include_usage_) {
      events += ChatUsageEvent(id_, {outcome.prompt_tokens, outcome.completion_tokens});
    }
    return events + std::string(kChatDoneEvent);
  }
  std::string StreamError(const ApiError& error) override {
    return absl::StrCat("data: ", ChatCompletionsError(error), "\n\n", std::string(kChatDoneEvent));
  }

 private:
  ChatCompletionsId id_;
  bool include_usage_;
};

class Endpoint::MessagesReply final : public Reply {
 public:
  MessagesReply(std::string model, bool omit_thinking)
      : model_(std::move(model)), omit_thinking_(omit_thinking) {}
  std::string Error(const ApiError& error) const override { return MessagesError(error); }
  void Name(uint64_t turn) override {
    id_ = absl::StrCat("msg_loom_", turn);
    stream_.emplace(id_, model_, omit_thinking_);
  }
  std::string Whole(const TurnOutcome& outcome) const override {
    return DumpJson(MessageJson(Turn(outcome)));
  }
  std::string Opening() override { return ""; }  // message_start waits for the prompt's length
  std::string Delta(const CompletionDelta& delta, int64_t prompt_tokens) override {
    return stream_->Delta(delta, prompt_tokens);
  }
  std::string Closing(const TurnOutcome& outcome) override {
    return stream_->Finish(Turn(outcome));
  }
  std::string StreamError(const ApiError& error) override { return MessagesStream::Error(error); }

 private:
  MessagesTurn Turn(const TurnOutcome& outcome) const {
    MessagesTurn turn;
    turn.id = id_;
    turn.model = model_;
    if (!omit_thinking_) turn.reasoning = outcome.reasoning;
    turn.content = outcome.content;
    turn.tool_calls = outcome.tool_calls;
    turn.stop_reason = outcome.finish == TurnOutcome::Finish::kToolCalls ? "tool_use"
                       : outcome.finish == TurnOutcome::Finish::kLength  ? "max_tokens"
                       : !outcome.stop_sequence.empty()                  ? "stop_sequence"
                                                                         : "end_turn";
    turn.stop_sequence = outcome.stop_sequence;
    turn.input_tokens = outcome.prompt_tokens;
    turn.output_tokens = outcome.completion_tokens;
    return turn;
  }

  std::string model_;
  bool omit_thinking_;
  std::string id_;
  std::optional<MessagesStream> stream_;
};

class Endpoint::ResponsesReply final : public Reply {
 public:
  explicit ResponsesReply(std::string model) {
    header_.model = std::move(model);
    header_.created_at = static_cast<int64_t>(std::time(nullptr));
  }
  std::string Error(const ApiError& error) const override { return ChatCompletionsError(error); }
  void Name(uint64_t turn) override {
    header_.id = absl::StrCat("resp_", turn);
    stream_.emplace(header_);
  }
  std::string Whole(const TurnOutcome& outcome) const override {
    return DumpJson(ResponseJson(Turn(outcome)));
  }
  std::string Opening() override { return stream_->Start(); }
  std::string Delta(const CompletionDelta& delta, int64_t) override {
    return stream_->Delta(delta);
  }
  std::string Closing(const TurnOutcome& outcome) override {
    return stream_->Finish(Turn(outcome));
  }
  std::string StreamError(const ApiError& error) override { return stream_->Failed(error.message); }

 private:
  ResponsesTurn Turn(const TurnOutcome& outcome) const {
    ResponsesTurn turn = header_;
    turn.reasoning = outcome.reasoning;
    turn.content = outcome.content;
    turn.tool_calls = outcome.tool_calls;
    turn.incomplete = outcome.finish == TurnOutcome::Finish::kLength;
    turn.input_tokens = outcome.prompt_tokens;
    turn.output_tokens = outcome.completion_tokens;
    return turn;
  }

  ResponsesTurn header_;
  std::optional<ResponsesStream> stream_;
};

void Endpoint::Serve(const TurnRequest& turn, Session& session, Reply& reply, HttpResponder& out) {
  const auto start = std::chrono::steady_clock::now();
  ApiError error;
  auto started = Begin(turn, session, &error);
  if (!started.ok()) {
    spdlog::info("turn refused ({}): {}", error.status, error.message);
    out.Send(error.status, kJson, reply.Error(error));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(session.mu);
    if (session.closed) runner_.Cancel(*started->turn);  // closed while it began
    session.running.insert(started->turn);
  }
  reply.Name(started->turn->id());
  if (!turn.stream) {
    TurnOutcome outcome =
        Follow(*started, turn, out, [](const CompletionDelta&, int64_t) { return true; });
    Keep(turn, session, *started, outcome, start);  // before the client's next request
    if (outcome.finish == TurnOutcome::Finish::kCancelled) {
      out.Send(499, kJson, "");
    } else if (!outcome.status.ok()) {
      const ApiError failure = ErrorFromStatus(outcome.status);
      out.Send(failure.status, kJson, reply.Error(failure));
    } else {
      out.Send(200, kJson, reply.Whole(outcome));
    }
    return;
  }
  const std::string opening = reply.Opening();
  if (!out.BeginEvents() || (!opening.empty() && !out.Event(opening))) {
    runner_.Cancel(*started->turn);
    TurnOutcome gone;
    gone.finish = TurnOutcome::Finish::kCancelled;
    Keep(turn, session, *started, gone, start);
    return;
  }
  TurnOutcome outcome =
      Follow(*started, turn, out, [&](const CompletionDelta& delta, int64_t prompt_tokens) {
        return out.Event(reply.Delta(delta, prompt_tokens));
      });
  Keep(turn, session, *started, outcome, start);
  if (outcome.finish == TurnOutcome::Finish::kCancelled) return;
  out.Event(outcome.status.ok() ? reply.Closing(outcome)
                                : reply.StreamError(ErrorFromStatus(outcome.status)));
  out.EndEvents();
}

void Endpoint::ChatCompletions(const HttpRequest& request, Session& session, HttpResponder& out) {
  auto parsed = ParseChatCompletionsRequest(request.body);
  if (!parsed.ok()) {
    out.Send(400, kJson, ChatCompletionsError(ErrorFromStatus(parsed.status())));
    return;
  }
  ChatCompletionsReply reply(options_.model_name, parsed->include_usage);
  Serve(parsed->turn, session, reply, out);
}

void Endpoint::Responses(const HttpRequest& request, Session& session, HttpResponder& out) {
  auto parsed = ParseResponsesRequest(request.body);
  if (!parsed.ok()) {
    out.Send(400, kJson, ChatCompletionsError(ErrorFromStatus(parsed.status())));
    return;
  }
  ResponsesReply reply(parsed->model.empty() ? options_.model_name : parsed->model);
  Serve(parsed->turn, session, reply, out);
}

void Endpoint::Messages(const HttpRequest& request, Session& session, HttpResponder& out) {
  auto parsed = ParseMessagesRequest(request.body);
  if (!parsed.ok()) {
    out.Send(400, kJson, MessagesError(ErrorFromStatus(parsed.status())));
    return;
  }
  MessagesReply reply(parsed->model.empty() ? options_.model_name : parsed->model,
                      parsed->omit_thinking);
  Serve(parsed->turn, session, reply, out);
}

void Endpoint::CountTokens(const HttpRequest& request, Session& session, HttpResponder& out) {
  auto refuse = [&](const absl::Status& status) {
    const ApiError error = ErrorFromStatus(status);
    out.Send(error.status, kJson, MessagesError(error));
  };
  auto parsed = ParseMessagesRequest(request.body, /*count_tokens=*/true);
  if (!parsed.ok()) return refuse(parsed.status());
  auto encode = EncodeFor(parsed->turn, session);
  if (!encode.ok()) return refuse(encode.status());
  auto ids = chat::EncodeIds(parsed->turn.messages, *encode, tokenizer_);
  if (!ids.ok()) return refuse(ids.status());
  out.Send(200, kJson, DumpJson({{"input_tokens", ids->size()}}));
}

}  // namespace loom::serve
