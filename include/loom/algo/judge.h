#pragma once
// Judging a step's samples: what each response earned from its task (the
// verifier on a completion, or an agent episode's verdict), how long it was
// and how stale, then the batch's rewards — the task's plus the
// effort-conditioned length reward. One judge for every trainer (GRPO, OPD)
// and the evaluator, so their figures mean the same.

#include <cstdint>
#include <string>
#include <vector>

#include "loom/algo/length_reward.h"
#include "loom/tasks/problem.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::algo {

// What a completion (the generated tokens after the prompt) earned.
struct Judgement {
  double reward = 0;        // the verifier's reward; 0 for a malformed completion
  bool parsed = false;      // the completion was a well-formed assistant message
  std::string content;      // its final answer (empty when malformed)
  std::string parse_error;  // why it was malformed
};
Judgement JudgeCompletion(const tasks::Problem& problem, const std::vector<int64_t>& completion,
                          const tokenizer::Tokenizer& tokenizer);

// One finished sample as a step sees it.
struct Verdict {
  Judgement judgement;
  std::string dataset;
  int effort = 0;
  uint64_t subgroup = 0;
  int64_t response_tokens = 0;   // generated tokens (an episode's tool output excluded)
  int64_t reasoning_tokens = 0;  // inside <think>: what the length reward is paid on
  int64_t lag = 0;               // policy versions its oldest generated token is behind
  bool episode = false;          // an agent episode: the two below count
  int64_t episode_steps = 0;
  bool broken = false;  // the agent broke its environment (a repercussion)
};

// The batch's rewards, per sample.
struct Rewards {
  std::vector<float> task;    // the judgement's
  std::vector<float> length;  // the length reward's (0 without one)
  std::vector<float> total;   // their sum
};
// `length`: the effort-conditioned length reward, or null for none.
Rewards RewardBatch(const std::vector<Verdict>& verdicts, const EffortLengthReward* length);

// Reasoning tokens of a multi-turn sample's `tokens` from `begin`: in each
// stretch of generated tokens (`loss_mask` 1: a turn), those before its
// `</think>` (all of them when `think_end_id` is -1).
int64_t MultiTurnReasoningLength(const std::vector<int64_t>& tokens,
                                 const std::vector<uint8_t>& loss_mask, int64_t begin,
                                 int64_t think_end_id);

}  // namespace loom::algo
