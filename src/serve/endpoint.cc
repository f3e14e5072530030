#include "loom/serve/endpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "loom/serve/chat_completions.h"

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

}  // namespace

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
      store_(options_.max_held) {}

bool Endpoint::Authorized(const HttpRequest& request) const {
  if (options_.api_key.empty()) return true;
  if (const std::string* key = request.Header("x-api-key")) {
    return SameSecret(*key, options_.api_key);
  }
  const std::string* auth = request.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return auth != nullptr && auth->compare(0, kBearer.size(), kBearer) == 0 &&
         SameSecret(std::string_view(*auth).substr(kBearer.size()), options_.api_key);
}

void Endpoint::Handle(const HttpRequest& request, HttpResponder& out) {
  auto refuse = [&](int status, const std::string& message) {
    out.Send(status, kJson, ChatCompletionsError({status, message, ""}));
  };
  if (!Authorized(request)) return refuse(401, "a missing or wrong API key");
  if (request.path == "/v1/models") {
    if (request.method != "GET") return refuse(405, "GET /v1/models");
    OrderedJson model = {
        {"id", options_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "loom"}};
    out.Send(200, kJson,
             OrderedJson{{"object", "list"}, {"data", OrderedJson::array({model})}}.dump());
    return;
  }
  if (request.path == "/v1/chat/completions") {
    if (request.method != "POST") return refuse(405, "POST /v1/chat/completions");
    return ChatCompletions(request, out);
  }
  refuse(404, absl::StrCat("no route ", request.method, " ", request.path));
}

std::optional<Endpoint::Started> Endpoint::Continue(const TurnRequest& turn,
                                                    const TurnSettings& settings,
                                                    const chat::EncodeOptions& encode) {
  std::optional<HeldConversation> held = store_.Take(turn.messages, settings);
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

absl::StatusOr<Endpoint::Started> Endpoint::Begin(const TurnRequest& turn, ApiError* error) {
  chat::EncodeOptions encode;
  encode.drop_thinking = false;  // a conversation's tokens only grow (see the header)
  const std::string& effort_name = turn.effort.empty() ? options_.default_effort : turn.effort;
  if (!effort_name.empty()) {
    auto effort = options_.effort_names.Lookup(effort_name);
    if (!effort.ok()) {
      *error = {400, absl::StrCat(turn.effort_field, ": ", effort.status().message()), ""};
      return effort.status();
    }
    encode.reasoning_effort = *effort;
  }
  ++turns_;
  const TurnSettings settings{effort_name, turn.temperature, turn.top_p, turn.max_tokens};
  if (std::optional<Started> continued = Continue(turn, settings, encode)) return *continued;
  auto ids = chat::EncodeIds(turn.messages, encode, tokenizer_);
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
  request.sampling.temperature = turn.temperature;
  request.sampling.top_p = turn.top_p;
  // Every turn of the conversation is generated on this sample: a message's
  // end (EOS or a tool-call block) parks it for the next request, the
  // request's max_tokens bounds each turn, the context all of them.
  request.stop.max_new_tokens = options_.context_window;
  request.stop.max_context = options_.context_window;
  request.stop.tool_call_end = {tool_calls_end_, {special_.eos}};
  request.stop.max_turn_tokens = turn.max_tokens;
  return Started{runner_.Begin(std::move(request)), settings, -1};
}

bool Endpoint::EndsCleanly(const std::vector<int64_t>& tokens) const {
  if (!tokens.empty() && tokens.back() == special_.eos) return true;
  return tokens.size() >= tool_calls_end_.size() &&
         std::equal(tool_calls_end_.rbegin(), tool_calls_end_.rend(), tokens.rbegin());
}

TurnOutcome Endpoint::Follow(const Started& started, const TurnRequest& request, HttpResponder& out,
                             const std::function<bool(const CompletionDelta&)>& on_delta) {
  TurnRunner::Turn& turn = *started.turn;
  TurnOutcome outcome;
  CompletionView view(chat::ThinkingMode::kThinking, request.stop);
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
      if (!Empty(delta) && !on_delta(delta)) return cancel();
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
  CompletionEnd end = view.Finish(text, clean);
  if (!Empty(end.delta) && !on_delta(end.delta)) return cancel();
  outcome.reasoning = view.reasoning();
  outcome.content = view.content();
  outcome.format_error = end.format_error;
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

void Endpoint::Keep(const TurnRequest& request, const Started& started,
                    const TurnOutcome& outcome) {
  const uint64_t sample = started.turn->sample();
  if (!outcome.held || outcome.finish == TurnOutcome::Finish::kCancelled || !outcome.status.ok()) {
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
  for (uint64_t evicted : store_.Put(std::move(held))) runner_.Release(evicted);
}

void Endpoint::ChatCompletions(const HttpRequest& request, HttpResponder& out) {
  auto parsed = ParseChatCompletionsRequest(request.body);
  if (!parsed.ok()) {
    out.Send(400, kJson, ChatCompletionsError(ErrorFromStatus(parsed.status())));
    return;
  }
  ApiError error;
  auto started = Begin(parsed->turn, &error);
  if (!started.ok()) {
    out.Send(error.status, kJson, ChatCompletionsError(error));
    return;
  }
  const ChatCompletionsId id{absl::StrCat("chatcmpl-", started->turn->id()),
                             static_cast<int64_t>(std::time(nullptr)), options_.model_name};
  if (!parsed->turn.stream) {
    TurnOutcome outcome =
        Follow(*started, parsed->turn, out, [](const CompletionDelta&) { return true; });
    Keep(parsed->turn, *started, outcome);  // before the client can send its next request
    if (outcome.finish == TurnOutcome::Finish::kCancelled) {
      out.Send(499, kJson, "");
      return;
    }
    if (!outcome.status.ok()) {
      const ApiError failure = ErrorFromStatus(outcome.status);
      out.Send(failure.status, kJson, ChatCompletionsError(failure));
      return;
    }
    out.Send(200, kJson,
             ChatCompletionJson(id, outcome.reasoning, outcome.content, outcome.tool_calls,
                                FinishReason(outcome.finish),
                                {outcome.prompt_tokens, outcome.completion_tokens})
                 .dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
    return;
  }
  if (!out.BeginEvents() ||
      !out.Event(ChatChunkEvent(id, {{"role", "assistant"}, {"content", ""}}, nullptr))) {
    runner_.Cancel(*started->turn);
    return;
  }
  TurnOutcome outcome = Follow(*started, parsed->turn, out, [&](const CompletionDelta& delta) {
    return out.Event(ChatChunkEvent(id, ChatDelta(delta), nullptr));
  });
  Keep(parsed->turn, *started, outcome);
  if (outcome.finish == TurnOutcome::Finish::kCancelled) return;
  if (!outcome.status.ok()) {
    out.Event(
        absl::StrCat("data: ", ChatCompletionsError(ErrorFromStatus(outcome.status)), "\n\n"));
  } else {
    if (!outcome.tool_calls.empty()) {
      out.Event(ChatChunkEvent(id, ChatToolCallsDelta(outcome.tool_calls), nullptr));
    }
    out.Event(ChatChunkEvent(id, OrderedJson::object(), FinishReason(outcome.finish)));
    if (parsed->include_usage) {
      out.Event(ChatUsageEvent(id, {outcome.prompt_tokens, outcome.completion_tokens}));
    }
  }
  out.Event(kChatDoneEvent);
  out.EndEvents();
}

}  // namespace loom::serve
