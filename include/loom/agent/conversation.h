#pragma once
// AgentConversation: one episode's messages as the tokens the engine holds.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

// The token view of one episode's conversation, kept by its client thread.
// Appended messages are encoded as a continuation of what came before, so
// nothing already in the engine is re-tokenised. Not thread-safe.
class AgentConversation {
 public:
  // `effort`: the numeric reasoning effort (1..100) in the system prompt; 0
  // writes none.
  AgentConversation(const tokenizer::Tokenizer& tokenizer, int effort, int64_t eos_id);

  // The ids of `request.append()`: the whole prompt on the first call, then
  // the continuation (led by EOS when the previous turn stopped at the end of
  // a tool-call block without one), ending with the next assistant prefix.
  absl::StatusOr<std::vector<int64_t>> Observe(const v1::GenerateRequest& request);

  // The worker's reply for a generated turn. A completion that does not parse
  // becomes `parse_error` (the worker answers with a format-error
  // observation); it stays in the token sequence as an empty assistant turn.
  v1::GenerateReply Reply(const std::string& completion, int turn);

  // How messages are encoded: thinking mode, with the effort line.
  const chat::EncodeOptions& options() const { return options_; }
  // The conversation so far, as encoded (an unparsable turn as an empty
  // assistant message).
  const std::vector<chat::Message>& messages() const { return messages_; }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  chat::EncodeOptions options_;
  int64_t eos_id_;
  std::vector<chat::Message> messages_;
  bool needs_eos_ = false;  // the last turn ended without EOS
};

}  // namespace loom::agent
