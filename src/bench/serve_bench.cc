#include "loom/bench/serve_bench.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "loom/chat/encoder.h"
#include "loom/config/files.h"
#include "loom/serve/anthropic_messages.h"
#include "loom/serve/completion_view.h"
#include "loom/serve/conversation_store.h"
#include "loom/tokenizer/tiny.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::bench {
namespace {

using chat::OrderedJson;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Deterministic prose of many distinct words (syllables in a linear
// congruential order), so that tokenising it is as much work as real text
// the first time, and numbers and paths as agents' tool output has them.
class Prose {
 public:
  std::string Words(int n) {
    static constexpr const char* kSyllables[] = {
        "ka",  "lo",   "mi",  "tre", "en",  "str", "ing",  "ation", "pro", "ver", "un",  "de",
        "com", "pa",   "ri",  "so",  "te",  "ble", "ment", "qu",    "or",  "ex",  "al",  "im",
        "ty",  "ness", "ful", "re",  "con", "di",  "na",   "ge",    "ho",  "vi",  "ble", "ck"};
    std::string text;
    for (int i = 0; i < n; ++i) {
      if (i > 0) text += Next() % 13 == 0 ? ".\n" : " ";
      const uint64_t kind = Next() % 16;
      if (kind == 0) {
        text += std::to_string(Next() % 10000);
      } else if (kind == 1) {
        text += "src/" + Syllables(2, kSyllables) + "_" + Syllables(2, kSyllables) + ".py";
      } else {
        text += Syllables(1 + Next() % 3, kSyllables);
      }
    }
    return text;
  }

 private:
  template <size_t N>
  std::string Syllables(uint64_t count, const char* const (&syllables)[N]) {
    std::string word;
    for (uint64_t j = 0; j < count; ++j) word += syllables[Next() % N];
    return word;
  }
  uint64_t Next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return state_ >> 33;
  }
  uint64_t state_ = 1;
};

OrderedJson Text(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

// Twelve tools with schemas of Claude Code's size and shape.
OrderedJson Tools(Prose& prose) {
  OrderedJson tools = OrderedJson::array();
  for (const char* name : {"Agent", "Bash", "Edit", "ListAgents", "Read", "ReportFindings",
                           "ScheduleWakeup", "Skill", "ToolSearch", "Workflow", "Glob", "Write"}) {
    OrderedJson properties = OrderedJson::object();
    for (int p = 0; p < 4; ++p) {
      properties[absl::StrCat("arg", p)] = {{"type", p == 3 ? "number" : "string"},
                                            {"description", prose.Words(25)}};
    }
    tools.push_back({{"name", name},
                     {"description", prose.Words(180)},
                     {"input_schema",
                      {{"type", "object"},
                       {"properties", std::move(properties)},
                       {"required", OrderedJson::array({"arg0"})},
                       {"additionalProperties", false}}}});
  }
  return tools;
}

// What the model says on turn `k`, as a chat message (the tool call's id is
// the endpoint's) and as the client sends it back.
struct Answer {
  chat::Message message;
  OrderedJson client;
};

Answer MakeAnswer(int k, Prose& prose) {
  Answer answer;
  answer.message.role = chat::Role::kAssistant;
  answer.message.reasoning_content = prose.Words(60);
  answer.message.content = prose.Words(15);
  const OrderedJson input = {{"arg0", absl::StrCat("pytest -x tests/test_", k, ".py")},
                             {"arg1", prose.Words(6)}};
  const std::string id = absl::StrCat("call_", k, "_0");
  answer.message.tool_calls = {{id, "Bash", input.dump()}};
  answer.client = {{"role", "assistant"},
                   {"content",
                    {{{"type", "thinking"},
                      {"thinking", *answer.message.reasoning_content},
                      {"signature", "msg"}},
                     Text(answer.message.content),
                     {{"type", "tool_use"}, {"id", id}, {"name", "Bash"}, {"input", input}}}}};
  return answer;
}

struct Timed {
  double parse = 0, match = 0, append = 0, completion = 0, hold = 0;
  double total() const { return parse + match + append + completion + hold; }
};

// What the client is shown of a completion: streamed in 4-byte pieces, as
// Follow feeds it token by token, then parsed whole.
struct Shown {
  std::string reasoning, content;
  std::vector<chat::ToolCall> tool_calls;
  bool format_error = false;
};

Shown ParseCompletion(const std::string& text, const std::vector<std::string>& stop) {
  serve::CompletionView view(chat::ThinkingMode::kThinking, stop);
  for (size_t n = 4; n < text.size(); n += 4) view.Update(std::string_view(text).substr(0, n));
  serve::CompletionEnd end = view.Finish(text, /*complete=*/true);
  return {view.reasoning(), view.content(), std::move(end.tool_calls), end.format_error};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunServeBench(const ServeBenchOptions& options) {
  if (options.calls < 1 || options.repeats < 1 || options.prompt_tokens < 1) {
    return absl::InvalidArgumentError("--calls, --repeats and --prompt-tokens must be positive");
  }
  auto vocabulary = ReadFile(options.tokenizer);
  if (!vocabulary.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        vocabulary.status().message(), " (run scripts/setup.sh, or give --tokenizer FILE)"));
  }
  int64_t vocab_size = 0;
  auto with_specials = tokenizer::WithChatSpecials(*vocabulary, &vocab_size);
  if (!with_specials.ok()) return with_specials.status();
  auto tok = tokenizer::Tokenizer::FromJson(*with_specials, options.tokenizer);
  if (!tok.ok()) return tok.status();
  const tokenizer::Tokenizer& tokenizer = **tok;

  chat::EncodeOptions encode;
  encode.drop_thinking = false;                                           // as the endpoint renders
  encode.reasoning_effort = {chat::ReasoningEffort::Kind::kNumeric, 75};  // "high"

  // The conversation before the first call: the system prompt grows until
  // the prompt reaches the size asked for.
  Prose prose;
  OrderedJson body = {
      {"model", "loom"},
      {"max_tokens", 32000},
      {"thinking", {{"type", "adaptive"}}},
      {"output_config", {{"effort", "high"}}},
      {"stream", true},
      {"system", {Text("x-anthropic-billing-header: cc_version=0;"), Text(prose.Words(100))}},
      {"tools", Tools(prose)},
      {"messages",
       {{{"role", "user"},
         {"content",
          {Text("<system-reminder>\n" + prose.Words(80) + "\n</system-reminder>\n"),
           Text("Fix the failing tests.")}}}}}};
  for (;;) {
    auto parsed = serve::ParseMessagesRequest(body.dump());
    if (!parsed.ok()) return parsed.status();
    auto ids = chat::EncodeIds(parsed->turn.messages, encode, tokenizer);
    if (!ids.ok()) return ids.status();
    if (static_cast<int64_t>(ids->size()) >= options.prompt_tokens) break;
    body["system"].push_back(Text(prose.Words(500)));
  }

  // The calls' bodies and the model's answers, made once.
  std::vector<std::string> bodies;
  std::vector<Answer> answers;
  for (int k = 0; k <= options.calls; ++k) {
    bodies.push_back(body.dump());
    answers.push_back(MakeAnswer(k, prose));
    body["messages"].push_back(answers.back().client);
    OrderedJson result = {{"type", "tool_result"},
                          {"tool_use_id", absl::StrCat("call_", k, "_0")},
                          {"content", prose.Words(150)}};
    body["messages"].push_back(
        {{"role", "user"}, {"content", OrderedJson::array({std::move(result)})}});
  }

  std::vector<Timed> endpoint;
  std::vector<double> rerender, rerender_cold, appended;
  int64_t tokens_first = 0, tokens_last = 0, continued = 0;
  for (int64_t repeat = 0; repeat < options.repeats; ++repeat) {
    serve::ConversationStore store(64);
    for (int k = 0; k <= options.calls; ++k) {
      // The endpoint's path.
      Timed t;
      auto t0 = Clock::now();
      auto parsed = serve::ParseMessagesRequest(bodies[k]);
      if (!parsed.ok()) return parsed.status();
      const serve::TurnRequest& turn = parsed->turn;
      const serve::TurnSettings settings{turn.effort, turn.temperature, turn.top_p, turn.max_tokens,
                                         turn.thinking};
      auto t1 = Clock::now();
      std::optional<serve::HeldConversation> held = store.Take(turn.messages, settings);
      auto t2 = Clock::now();
      absl::StatusOr<std::vector<int32_t>> ids;
      if (held) {
        const std::vector<chat::Message> added(turn.messages.begin() + held->messages.size(),
                                               turn.messages.end());
        ids = chat::EncodeContinuation(held->messages, added, encode, tokenizer);
      } else {
        ids = chat::EncodeIds(turn.messages, encode, tokenizer);  // the first call: nothing held
      }
      if (!ids.ok()) return ids.status();
      auto t3 = Clock::now();
      // The model's completion, exactly as the format renders its answer.
      std::vector<chat::Message> answered = turn.messages;
      answered.push_back(answers[k].message);
      auto before = chat::EncodePrompt(turn.messages, encode);
      auto after = chat::EncodePrompt(answered, encode);
      if (!before.ok() || !after.ok() || after->compare(0, before->size(), *before) != 0) {
        return absl::InternalError("the answer's rendering does not extend the prompt");
      }
      const std::string completion = after->substr(before->size());
      auto t4 = Clock::now();
      Shown shown = ParseCompletion(completion, turn.stop);
      if (shown.format_error || shown.tool_calls.size() != 1) {
        return absl::InternalError("the model's completion does not parse");
      }
      auto t5 = Clock::now();
      serve::HeldConversation next{turn.messages, static_cast<uint64_t>(k), false, settings};
      chat::Message assistant;
      assistant.role = chat::Role::kAssistant;
      assistant.content = shown.content;
      assistant.reasoning_content = shown.reasoning;
      assistant.tool_calls = std::move(shown.tool_calls);
      next.messages.push_back(std::move(assistant));
      store.Put(std::move(next));
      auto t6 = Clock::now();
      t.parse = Ms(t0, t1);
      t.match = Ms(t1, t2);
      t.append = Ms(t2, t3);
      t.completion = Ms(t4, t5);
      t.hold = Ms(t5, t6);

      // Rendering and tokenising the whole history instead.
      auto r0 = Clock::now();
      auto again = serve::ParseMessagesRequest(bodies[k]);
      if (!again.ok()) return again.status();
      auto whole = chat::EncodeIds(again->turn.messages, encode, tokenizer);
      if (!whole.ok()) return whole.status();
      ParseCompletion(completion, turn.stop);
      auto r1 = Clock::now();

      // The same with a tokenizer that has not seen the history: what a
      // server without loom's word cache, or a new conversation, pays.
      if (repeat == 0 && k > 0) {
        auto fresh = tokenizer::Tokenizer::FromJson(*with_specials, options.tokenizer);
        if (!fresh.ok()) return fresh.status();
        auto c0 = Clock::now();
        auto cold = serve::ParseMessagesRequest(bodies[k]);
        if (!cold.ok()) return cold.status();
        auto cold_ids = chat::EncodeIds(cold->turn.messages, encode, **fresh);
        if (!cold_ids.ok()) return cold_ids.status();
        ParseCompletion(completion, turn.stop);
        rerender_cold.push_back(Ms(c0, Clock::now()));
      }

      if (k == 0) {
        tokens_first = static_cast<int64_t>(whole->size());
        continue;  // nothing was held yet: not a continuation
      }
      if (!held) return absl::InternalError(absl::StrCat("call ", k, " did not continue"));
      ++continued;
      tokens_last = static_cast<int64_t>(whole->size());
      endpoint.push_back(t);
      rerender.push_back(Ms(r0, r1));
      appended.push_back(static_cast<double>(ids->size()));
    }
  }

  std::vector<double> totals;
  for (const Timed& t : endpoint) totals.push_back(t.total());
  auto part = [&](double Timed::*field) {
    std::vector<double> v;
    for (const Timed& t : endpoint) v.push_back(t.*field);
    return Percentile(v, 0.5);
  };
  const double endpoint_p50 = Percentile(totals, 0.5);
  const double rerender_p50 = Percentile(rerender, 0.5);
  return nlohmann::json{
      {"tokens_first", tokens_first},
      {"tokens_last", tokens_last},
      {"body_bytes_last", bodies.back().size()},
      {"calls", options.calls},
      {"repeats", options.repeats},
      {"continued", continued},
      {"appended_tokens_p50", Percentile(appended, 0.5)},
      // What the model prefills on a call: the whole history, or only what was appended.
      {"prefill_whole_over_appended", static_cast<double>(tokens_last) / Percentile(appended, 0.5)},
      {"endpoint_ms_p50", endpoint_p50},
      {"endpoint_ms_p90", Percentile(totals, 0.9)},
      {"rerender_ms_p50", rerender_p50},
      {"rerender_ms_p90", Percentile(rerender, 0.9)},
      {"rerender_over_endpoint", rerender_p50 / endpoint_p50},
      {"rerender_cold_ms_p50", Percentile(rerender_cold, 0.5)},
      {"rerender_cold_over_endpoint", Percentile(rerender_cold, 0.5) / endpoint_p50},
      {"endpoint_parts_ms_p50",
       {{"parse", part(&Timed::parse)},
        {"match", part(&Timed::match)},
        {"append", part(&Timed::append)},
        {"completion", part(&Timed::completion)},
        {"hold", part(&Timed::hold)}}}};
}

}  // namespace loom::bench
