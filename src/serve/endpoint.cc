#include "loom/serve/endpoint.h"

#include <spdlog/spdlog.h>

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
void LogTurn(uint64_t turn, const TurnOutcome& outcome) {
  const char* how = outcome.finish == TurnOutcome::Finish::kCancelled ? "cancelled (client gone)"
                    : !outcome.status.ok()                            ? "failed"
                                           : FinishReason(outcome.finish);
  spdlog::info("turn {}: {} after {} tokens, prompt {}{}{}", turn, how, outcome.completion_tokens,
               outcome.prompt_tokens, outcome.format_error ? ", malformed completion" : "",
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
      tool_calls_end_(std::move(tool_calls_end)) {}

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

absl::StatusOr<std::shared_ptr<TurnRunner::Turn>> Endpoint::Begin(const TurnRequest& turn,
                                                                  ApiError* error) {
  chat::EncodeOptions encode;
  const std::string& effort_name = turn.effort.empty() ? options_.default_effort : turn.effort;
  if (!effort_name.empty()) {
    auto effort = options_.effort_names.Lookup(effort_name);
    if (!effort.ok()) {
      *error = {400, absl::StrCat(turn.effort_field, ": ", effort.status().message()), ""};
      return effort.status();
    }
    encode.reasoning_effort = *effort;
  }
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
  const int64_t room = options_.context_window - prompt;
  request.stop.max_new_tokens = turn.max_tokens > 0 ? std::min(turn.max_tokens, room) : room;
  request.stop.max_context = options_.context_window;
  request.stop.eos_token_ids = {special_.eos};
  request.stop.tool_call_end = {tool_calls_end_};
  ++turns_;
  return runner_.Begin(std::move(request));
}

TurnOutcome Endpoint::Follow(TurnRunner::Turn& turn, const TurnRequest& request, HttpResponder& out,
                             const std::function<bool(const CompletionDelta&)>& on_delta) {
  TurnOutcome outcome;
  outcome.prompt_tokens = turn.prompt_tokens();
  CompletionView view(chat::ThinkingMode::kThinking, request.stop);
  TurnProgress progress;
  std::vector<int64_t> tokens;
  std::string text;  // the decoded tokens: byte-level decoding appends piece by piece
  auto cancel = [&] {
    runner_.Cancel(turn);
    outcome.finish = TurnOutcome::Finish::kCancelled;
    outcome.completion_tokens = static_cast<int64_t>(tokens.size());
    LogTurn(turn.id(), outcome);
    return outcome;
  };
  while (!progress.done && !view.stopped()) {
    progress = runner_.Wait(turn, tokens.size(), std::chrono::milliseconds(50));
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
  const bool complete = !view.stopped() && (progress.finish == rollout::FinishReason::kEos ||
                                            progress.finish == rollout::FinishReason::kToolCall);
  CompletionEnd end = view.Finish(text, complete);
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
  } else if (!view.stopped() && (progress.finish == rollout::FinishReason::kMaxNewTokens ||
                                 progress.finish == rollout::FinishReason::kContextLimit)) {
    outcome.finish = TurnOutcome::Finish::kLength;
  }
  LogTurn(turn.id(), outcome);
  return outcome;
}

void Endpoint::ChatCompletions(const HttpRequest& request, HttpResponder& out) {
  auto parsed = ParseChatCompletionsRequest(request.body);
  if (!parsed.ok()) {
    out.Send(400, kJson, ChatCompletionsError(ErrorFromStatus(parsed.status())));
    return;
  }
  ApiError error;
  auto turn = Begin(parsed->turn, &error);
  if (!turn.ok()) {
    out.Send(error.status, kJson, ChatCompletionsError(error));
    return;
  }
  const ChatCompletionsId id{absl::StrCat("chatcmpl-", (*turn)->id()),
                             static_cast<int64_t>(std::time(nullptr)), options_.model_name};
  if (!parsed->turn.stream) {
    TurnOutcome outcome =
        Follow(**turn, parsed->turn, out, [](const CompletionDelta&) { return true; });
    if (outcome.finish == TurnOutcome::Finish::kCancelled) {
      out.Send(499, kJson, "");
      return;
    }
    if (!outcome.status.ok()) {
      out.Send(500, kJson, ChatCompletionsError(ErrorFromStatus(outcome.status)));
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
    runner_.Cancel(**turn);
    return;
  }
  TurnOutcome outcome = Follow(**turn, parsed->turn, out, [&](const CompletionDelta& delta) {
    return out.Event(ChatChunkEvent(id, ChatDelta(delta), nullptr));
  });
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
