#pragma once
// ConversationStore: the conversations the model endpoint holds between
// requests, for token-in/token-out. A harness re-sends the whole history with
// each request; when that history extends a held conversation, the request
// continues the held engine sample (its tokens and KV) with only the new
// messages' tokens appended, so the model's own turns stay exactly the tokens
// it generated, however the harness re-serialised them. A history that
// extends nothing held (a compacted or edited one, a sub-agent's, a retry of
// a turn already taken) starts a new sample: a new segment.
//
// A held conversation matches when each of its messages is the same turn as
// the request's message at that place (SameTurn) and its settings are the
// same. Taking an entry removes it, so one sample never serves two requests;
// the store keeps at most `capacity` entries and evicts the least recently
// used, returning their samples for the caller to release. Thread-safe.

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loom/chat/encoder.h"
#include "loom/chat/message.h"

namespace loom::serve {

// What must agree for a conversation to continue on its sample: the prompt's
// effort line and the sample's fixed sampling and stop rules.
struct TurnSettings {
  std::string effort;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t max_tokens = 0;
  chat::ThinkingMode thinking = chat::ThinkingMode::kThinking;

  bool operator==(const TurnSettings& o) const {
    return effort == o.effort && temperature == o.temperature && top_p == o.top_p &&
           max_tokens == o.max_tokens && thinking == o.thinking;
  }
};

struct HeldConversation {
  std::vector<chat::Message> messages;  // as the model saw them, its own turns as parsed
  uint64_t sample = 0;                  // the engine sample holding their tokens
  bool needs_eos = false;               // its last turn stopped without the end of sentence
  TurnSettings settings;
};

// Whether `sent` (from a request) is the turn `held` was. Assistant turns
// compare by what they say: content and reasoning with surrounding
// whitespace ignored (a missing reasoning matches any: harnesses drop it),
// tool calls by name and by arguments as JSON values (key order and spacing
// ignored; ids ignored). Other messages compare exactly, tools as JSON values.
bool SameTurn(const chat::Message& held, const chat::Message& sent);

class ConversationStore {
 public:
  explicit ConversationStore(size_t capacity) : capacity_(capacity) {}

  // Removes and returns the held conversation with the most messages that
  // `messages` extends by at least one message, under `settings`.
  std::optional<HeldConversation> Take(const std::vector<chat::Message>& messages,
                                       const TurnSettings& settings);
  // Holds `conversation`; returns the samples of the entries it evicted.
  std::vector<uint64_t> Put(HeldConversation conversation);
  // Removes every entry; returns their samples.
  std::vector<uint64_t> Clear();
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<HeldConversation> entries_;  // most recently used first; guarded by mu_
};

}  // namespace loom::serve
