#pragma once
// The ids of the chat format's special tokens that the trainer acts on (EOS
// stops a sample, `</think>` ends its reasoning, the end of a DSML tool-call
// block ends an agent's turn), resolved once from a tokenizer so that callers
// never spell the format's strings themselves. Plain values; thread-safe.

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::chat {

struct SpecialTokenIds {
  int64_t eos = 0;         // <｜end▁of▁sentence｜>: ends a turn (required)
  int64_t think_end = -1;  // </think>: ends the reasoning; -1 when the tokenizer has none

  // INVALID_ARGUMENT naming the missing string when `tokenizer` has no EOS
  // token; a missing `</think>` is not an error (think_end = -1).
  static absl::StatusOr<SpecialTokenIds> Resolve(const tokenizer::Tokenizer& tokenizer);
};

// Whether a decoded completion ends with the format's EOS string.
bool EndsWithEos(std::string_view text);

// The ids that end a DSML tool-call block (`\n</｜DSML｜tool_calls>`) as the
// encoder tokenizes them: the last id of the text before the DSML marker (so
// the opening tag does not match), the marker, the rest of the tag.
absl::StatusOr<std::vector<int64_t>> ToolCallsEndIds(const tokenizer::Tokenizer& tokenizer);

}  // namespace loom::chat
