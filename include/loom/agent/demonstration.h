#pragma once
// A demonstration (tasks::BuiltinDemonstration) as the SFT example of the
// episode it scripts: the tokens the rollout would hold had the policy
// generated the demonstration's turns, built from the same pieces an episode
// is built from — the worker's opening and tool messages (sandbox/scaffold.h)
// encoded by AgentConversation — with the loss on the generated tokens only.
// A tool-call turn ends at the tool-call block's closing tag, where the
// engine stops it; the EOS after it belongs to the next observation.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/tasks/agent_tasks.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::agent {

struct DemonstrationExample {
  std::vector<int64_t> tokens;     // [T]
  std::vector<uint8_t> loss_mask;  // [T]: 1 on the assistant turns' tokens
};

// `effort`: as AgentConversation's. INVALID_ARGUMENT when a turn does not
// parse back as itself, its results do not match its tool calls, a turn
// after the last one has no tool call to answer, or the turns exceed the
// options' max_steps.
absl::StatusOr<DemonstrationExample> EncodeDemonstration(
    const v1::Task& task, const std::vector<tasks::DemonstrationTurn>& turns,
    const v1::ScaffoldOptions& options, const tokenizer::Tokenizer& tokenizer, int effort,
    int64_t eos_id);

}  // namespace loom::agent
