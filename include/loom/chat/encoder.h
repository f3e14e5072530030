#pragma once
// The DeepSeek-V4 prompt encoder (shared/dsv4-format.md), byte for byte, as
// text and as token ids. Stateless functions; thread-safe.
//
// A rendered prompt is a list of pieces: plain text, and the format's
// special strings (BOS, EOS, <think>, <｜User｜>, ｜DSML｜, ...). Its text is the
// pieces joined. Its ids encode each special piece as the tokenizer's id for
// that string when the tokenizer has one, and the text between such pieces
// with Tokenizer::Encode; so the ids equal Hugging Face's
// `encode(prompt_text)` whenever the special strings are added tokens.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/chat/message.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::chat {

enum class ThinkingMode { kThinking, kChat };

// Reasoning effort: kNone and the format's literal kHigh render nothing,
// its literal kMax renders the "Absolute maximum" prefix, kNumeric renders
// loom's line "Reasoning Effort: {b} (range 1–100; ...)". Only in thinking
// mode.
struct ReasoningEffort {
  enum class Kind { kNone, kHigh, kMax, kNumeric };
  Kind kind = Kind::kNone;
  int b = 0;  // 1..100, kNumeric only
};

// Parses an integer 1..100, a tier name (config/effort_tiers.h: max = 100,
// high = 75, low = 50; numeric), "none", or the DeepSeek-V4 literal modes
// "v4-max" and "v4-high".
absl::StatusOr<ReasoningEffort> ParseReasoningEffort(const std::string& text);

struct EncodeOptions {
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
  bool drop_thinking = true;
  bool add_bos = true;
  ReasoningEffort reasoning_effort;
};

struct PromptPiece {
  std::string text;
  bool special = false;  // one of the format's special strings
};

// The prompt of `messages`. Errors: INVALID_ARGUMENT for a numeric effort
// outside 1..100.
absl::StatusOr<std::vector<PromptPiece>> EncodePieces(const std::vector<Message>& messages,
                                                      const EncodeOptions& options);
absl::StatusOr<std::string> EncodePrompt(const std::vector<Message>& messages,
                                         const EncodeOptions& options);

// Ids of rendered pieces (see the header comment).
absl::StatusOr<std::vector<int32_t>> PiecesToIds(const std::vector<PromptPiece>& pieces,
                                                 const tokenizer::Tokenizer& tokenizer);
absl::StatusOr<std::vector<int32_t>> EncodeIds(const std::vector<Message>& messages,
                                               const EncodeOptions& options,
                                               const tokenizer::Tokenizer& tokenizer);

// Multi-turn without re-encoding: the ids that follow the encoding of
// `prior` when `added` (tool results, user turns) are appended, ending with
// the next assistant prefix, so that EncodeIds(prior) + result ==
// EncodeIds(prior + added). FAILED_PRECONDITION when the earlier prompt
// would change (drop_thinking removes reasoning once a new user turn comes;
// tools on any message turn it off) or ends mid-text (wo_eos).
absl::StatusOr<std::vector<int32_t>> EncodeContinuation(const std::vector<Message>& prior,
                                                        const std::vector<Message>& added,
                                                        const EncodeOptions& options,
                                                        const tokenizer::Tokenizer& tokenizer);

}  // namespace loom::chat
