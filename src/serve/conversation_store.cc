#include "loom/serve/conversation_store.h"

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"

namespace loom::serve {
namespace {

bool SameText(const std::string& a, const std::string& b) {
  return absl::StripAsciiWhitespace(a) == absl::StripAsciiWhitespace(b);
}

// JSON text compared as values; text that is not JSON compared as it is.
bool SameJsonText(const std::string& a, const std::string& b) {
  const auto x = nlohmann::json::parse(a, nullptr, false);
  const auto y = nlohmann::json::parse(b, nullptr, false);
  if (x.is_discarded() || y.is_discarded()) return a == b;
  return x == y;
}

// Equal documents (the usual case: a harness re-sends its tools as they
// were) compare without serialising; others as values, key order ignored.
bool SameJson(const std::optional<chat::OrderedJson>& a,
              const std::optional<chat::OrderedJson>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || *a == *b || SameJsonText(a->dump(), b->dump());
}

bool SameToolCalls(const std::vector<chat::ToolCall>& a, const std::vector<chat::ToolCall>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || !SameJsonText(a[i].arguments, b[i].arguments)) return false;
  }
  return true;
}

bool Extends(const std::vector<chat::Message>& held, const std::vector<chat::Message>& sent) {
  if (sent.size() <= held.size()) return false;
  for (size_t i = 0; i < held.size(); ++i) {
    if (!SameTurn(held[i], sent[i])) return false;
  }
  return true;
}

}  // namespace

bool SameTurn(const chat::Message& held, const chat::Message& sent) {
  if (held.role != sent.role) return false;
  if (held.role == chat::Role::kAssistant) {
    const bool reasoning = !sent.reasoning_content ||
                           SameText(held.reasoning_content.value_or(""), *sent.reasoning_content);
    return SameText(held.content, sent.content) && reasoning &&
           SameToolCalls(held.tool_calls, sent.tool_calls);
  }
  return held.content == sent.content && held.tool_call_id == sent.tool_call_id &&
         held.reasoning_content == sent.reasoning_content && held.task == sent.task &&
         held.wo_eos == sent.wo_eos && SameJson(held.tools, sent.tools) &&
         SameJson(held.response_format, sent.response_format) &&
         SameToolCalls(held.tool_calls, sent.tool_calls);
}

std::optional<HeldConversation> ConversationStore::Take(const std::vector<chat::Message>& messages,
                                                        const TurnSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!(it->settings == settings) || !Extends(it->messages, messages)) continue;
    if (best == entries_.end() || it->messages.size() > best->messages.size()) best = it;
  }
  if (best == entries_.end()) return std::nullopt;
  HeldConversation taken = std::move(*best);
  entries_.erase(best);
  return taken;
}

std::vector<uint64_t> ConversationStore::Put(HeldConversation conversation) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_front(std::move(conversation));
  std::vector<uint64_t> evicted;
  while (entries_.size() > capacity_) {
    evicted.push_back(entries_.back().sample);
    entries_.pop_back();
  }
  return evicted;
}

std::vector<uint64_t> ConversationStore::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> samples;
  for (const HeldConversation& entry : entries_) samples.push_back(entry.sample);
  entries_.clear();
  return samples;
}

size_t ConversationStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace loom::serve
