#include "loom/agent/conversation.h"

#include "loom/agent/chat_bridge.h"
#include "loom/chat/special_tokens.h"
#include "loom/tokenizer/utf8.h"

namespace loom::agent {
namespace {

std::vector<int64_t> Widen(const std::vector<int32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

}  // namespace

AgentConversation::AgentConversation(const tokenizer::Tokenizer& tokenizer, int effort,
                                     int64_t eos_id)
    : tokenizer_(tokenizer), eos_id_(eos_id) {
  options_.thinking_mode = chat::ThinkingMode::kThinking;
  // An episode keeps its earlier turns' reasoning, as the format does when
  // tools are listed, also when the worker leaves their schemas out: the
  // tokens already in the engine never change.
  options_.drop_thinking = false;
  if (effort > 0) {
    options_.reasoning_effort.kind = chat::ReasoningEffort::Kind::kNumeric;
    options_.reasoning_effort.b = effort;
  }
}

absl::StatusOr<std::vector<int64_t>> AgentConversation::Observe(
    const v1::GenerateRequest& request) {
  std::vector<chat::Message> added;
  for (const v1::Message& m : request.append()) {
    absl::StatusOr<chat::Message> message = agent::ToChatMessage(m);
    if (!message.ok()) return message.status();
    added.push_back(*std::move(message));
  }
  std::vector<int64_t> ids;
  if (messages_.empty()) {
    absl::StatusOr<std::vector<int32_t>> prompt = chat::EncodeIds(added, options_, tokenizer_);
    if (!prompt.ok()) return prompt.status();
    ids = Widen(*prompt);
  } else {
    absl::StatusOr<std::vector<int32_t>> next =
        chat::EncodeContinuation(messages_, added, options_, tokenizer_);
    if (!next.ok()) return next.status();
    if (needs_eos_) ids.push_back(eos_id_);
    const std::vector<int64_t> rest = Widen(*next);
    ids.insert(ids.end(), rest.begin(), rest.end());
  }
  messages_.insert(messages_.end(), added.begin(), added.end());
  if (ids.empty()) return absl::InvalidArgumentError("worker request appends nothing");
  return ids;
}

v1::GenerateReply AgentConversation::Reply(const std::string& completion, int turn) {
  v1::GenerateReply reply =
      agent::ReplyFromCompletion(tokenizer::RepairUtf8(completion), options_.thinking_mode, turn);
  chat::Message assistant;
  assistant.role = chat::Role::kAssistant;
  if (reply.has_assistant()) {
    absl::StatusOr<chat::Message> parsed = agent::ToChatMessage(reply.assistant());
    if (parsed.ok()) assistant = *std::move(parsed);
  }
  // An unparsable turn still sits in the token sequence; an empty assistant
  // message stands for it so the next observation encodes as a new user turn.
  messages_.push_back(std::move(assistant));
  needs_eos_ = !chat::EndsWithEos(completion);
  return reply;
}

}  // namespace loom::agent
