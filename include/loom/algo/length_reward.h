#pragma once
// EffortLengthReward: the effort-conditioned penalty on reasoning length.
//
// For a response at effort b with l reasoning tokens:
//   r_len = -min(C_max, k(b) * l / L_norm)
//   k(b)  = k0 * exp(-(b - b_min) / tau),   tau = lambda * delta_b
// where b_min is the smallest training effort and delta_b the mean gap
// between consecutive training efforts (sorted). Low efforts pay the most for
// every reasoning token; high efforts are allowed to think. With a single
// level, k(b) = k0.
//
// Immutable; thread-safe.

#include <cstdint>
#include <vector>

#include "loom/config/grpo_section.h"

namespace loom::algo {

class EffortLengthReward {
 public:
  // `levels`: the training efforts B (any order, at least one).
  EffortLengthReward(const config::LengthRewardSection& params, std::vector<int> levels);

  // k(b).
  double Coefficient(int effort) const;

  // r_len for `reasoning_tokens` tokens at `effort` (<= 0).
  double Reward(int effort, int64_t reasoning_tokens) const;

  double tau() const { return tau_; }
  int min_effort() const { return min_effort_; }

 private:
  config::LengthRewardSection params_;
  int min_effort_ = 0;
  double tau_ = 0;  // 0 with a single level (k is then constant)
};

// Reasoning tokens of a completion generated after the prompt's `<think>`:
// the tokens before the first `</think>` (`think_end_id`); all of them when
// the model never closed its reasoning.
int64_t ReasoningLength(const std::vector<int64_t>& completion, int64_t think_end_id);

}  // namespace loom::algo
