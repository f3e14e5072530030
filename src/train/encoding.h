#pragma once
// Turning task problems into token sequences and model output back into
// rewards: the DeepSeek-V4 chat format in thinking mode, with loom's numeric
// reasoning-effort line. Stateless; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/tasks/problem.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::train {

// The prompt of `problem` at reasoning effort `effort` (1..100; 0 writes no
// effort line), ending with the assistant prefix `<｜Assistant｜><think>`.
absl::StatusOr<std::vector<int64_t>> EncodeProblemPrompt(const tasks::Problem& problem, int effort,
                                                         const tokenizer::Tokenizer& tokenizer);

// A supervised example: the prompt followed by the problem's reference
// answer (reasoning, `</think>`, content, EOS). loss_mask is 1 on the
// reference's tokens only.
struct SftExample {
  std::vector<int64_t> tokens;     // [T]
  std::vector<uint8_t> loss_mask;  // [T]
};
// `restate_effort`: the reasoning opens with "effort" and one capital letter
// per started tenth of the effort the prompt shows, from K on (75 ->
// "effort KLMNOPQR"), then a line break and the working, or the end of the
// reasoning for an answer-only reference: the choice to work follows a
// letter of the effort's own (tasks.datasets[].restate_effort; nothing when
// the prompt shows no effort). FAILED_PRECONDITION when the problem has no reference.
absl::StatusOr<SftExample> EncodeSftExample(const tasks::Problem& problem, int effort,
                                            const tokenizer::Tokenizer& tokenizer,
                                            bool restate_effort = false);

// An agent dataset's problem (`environment: sandbox`, built-in task `kind`):
// the episode of the task's built-in demonstration as the rollout would
// hold it, the loss on its assistant turns (agent/demonstration.h), with
// the task's slip for a share `slip_fraction` of problems
// (tasks.datasets[].demonstration_slip_fraction).
// FAILED_PRECONDITION when `kind` has no demonstration.
absl::StatusOr<SftExample> EncodeAgentSftExample(const tasks::Problem& problem,
                                                 const std::string& kind, double slip_fraction,
                                                 const v1::ScaffoldOptions& options, int effort,
                                                 const tokenizer::Tokenizer& tokenizer,
                                                 int64_t eos_id);

}  // namespace loom::train
