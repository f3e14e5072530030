#pragma once
// The clipped policy term of a trainer's loss, chosen once from a stage's
// config keys (grpo.clip_*, opd.clip_*): the PPO-style surrogate on
// per-token advantages against the recorded behaviour log-probs, tokens
// older than async.mask_lag masked, one token-level mean over the step.
// GRPO takes it on subgroup advantages (with an optional KL penalty to a
// reference), OPD on the sampled KL's and the reward's. Private to the
// train module.

#include <ATen/ATen.h>

#include <cstdint>

#include "loom/algo/policy_loss.h"
#include "train/micro_batch.h"

namespace loom::train {

class ClippedPolicyTerm {
 public:
  struct Options {
    double clip_low = 0.2;
    double clip_high = 0.2;
    int64_t mask_lag = -1;
    double kl_coef = 0;  // the KL penalty's weight, where a reference is given
  };
  explicit ClippedPolicyTerm(Options options) : options_(options) {}

  // The term over a packed micro-batch: `logprobs` the policy's of its
  // targets, `advantages` [T] per token, at policy version `version`,
  // normalised by the step's `normalizer` weighted tokens. `reference`: the
  // reference model's log-probs for the KL penalty, or undefined for none.
  algo::PolicyLossResult Loss(const PackedSamples& packed, const at::Tensor& logprobs,
                              const at::Tensor& advantages, int64_t version, double normalizer,
                              const at::Tensor& reference = at::Tensor()) const;

 private:
  Options options_;
};

}  // namespace loom::train
