#include "train/loss_terms.h"

namespace loom::train {

algo::PolicyLossResult ClippedPolicyTerm::Loss(const PackedSamples& packed,
                                               const at::Tensor& logprobs,
                                               const at::Tensor& advantages, int64_t version,
                                               double normalizer,
                                               const at::Tensor& reference) const {
  // Everything but the log-probs is built on the CPU: move it once to where
  // the log-probs are (no copy when that is the CPU).
  const at::Device device = logprobs.device();
  algo::PolicyLossInputs inputs;
  inputs.logprobs = logprobs;
  inputs.behaviour_logprobs = packed.behaviour.to(device);
  inputs.advantages = advantages.to(device);
  inputs.loss_mask = packed.shifted.target_weight.to(device);
  inputs.versions = packed.versions.to(device);
  algo::PolicyLossOptions options;
  options.clip_low = options_.clip_low;
  options.clip_high = options_.clip_high;
  options.policy_version = version;
  options.mask_lag = options_.mask_lag;
  options.normalizer = normalizer;
  if (reference.defined()) {
    inputs.ref_logprobs = reference;
    options.kl_coef = options_.kl_coef;
  }
  return algo::PolicyLoss(inputs, options);
}

}  // namespace loom::train
