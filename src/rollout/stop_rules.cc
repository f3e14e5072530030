#include "rollout/stop_rules.h"

#include <algorithm>
#include <vector>

namespace loom::rollout {
namespace {

// True when tokens[turn_start, T) ends with a non-empty `sequence`.
bool TurnEndsWith(const SampleState& state, const std::vector<int64_t>& sequence) {
  const int64_t n = static_cast<int64_t>(sequence.size());
  if (n == 0 || state.length() - state.turn_start < n) return false;
  return std::equal(sequence.begin(), sequence.end(), state.tokens.end() - n);
}

bool AnyEndsWith(const SampleState& state, const std::vector<std::vector<int64_t>>& sequences) {
  return std::any_of(sequences.begin(), sequences.end(),
                     [&](const std::vector<int64_t>& s) { return TurnEndsWith(state, s); });
}

}  // namespace

FinishReason CheckStop(const SampleState& state, int64_t context_limit) {
  const StopParams& stop = state.stop;
  const int64_t last = state.tokens.back();
  if (std::find(stop.eos_token_ids.begin(), stop.eos_token_ids.end(), last) !=
      stop.eos_token_ids.end()) {
    return FinishReason::kEos;
  }
  if (AnyEndsWith(state, stop.tool_call_end)) return FinishReason::kToolCall;
  if (AnyEndsWith(state, stop.stop_sequences)) return FinishReason::kStopSequence;
  if (state.generated >= stop.max_new_tokens) return FinishReason::kMaxNewTokens;
  if (state.length() >= context_limit) return FinishReason::kContextLimit;
  // A turn that runs too long parks like a tool call: the caller decides what follows.
  if (stop.max_turn_tokens > 0 && state.length() - state.turn_start >= stop.max_turn_tokens) {
    return FinishReason::kToolCall;
  }
  return FinishReason::kNone;
}

}  // namespace loom::rollout
