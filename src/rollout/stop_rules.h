#pragma once
// Stop rules checked after every generated token.

#include <cstdint>

#include "loom/rollout/sample_state.h"

namespace loom::rollout {

// Why `state` stops after its last token was appended (kNone: it goes on).
// `context_limit` is the effective limit in tokens (model, request and pool).
// Precedence when several apply: EOS, tool call, stop sequence, max new
// tokens, context limit, then the per-turn cap (parks like a tool call).
FinishReason CheckStop(const SampleState& state, int64_t context_limit);

}  // namespace loom::rollout
