#include "loom/algo/policy_loss.h"

#include <algorithm>

#include "loom/config/check.h"

namespace loom::algo {
namespace {

void CheckShapes(const PolicyLossInputs& in) {
  const auto sizes = in.logprobs.sizes();
  LOOM_CHECK(in.logprobs.dim() == 1, "logprobs must be [T], got " << sizes);
  for (const at::Tensor* t :
       {&in.behaviour_logprobs, &in.advantages, &in.loss_mask, &in.versions}) {
    LOOM_CHECK(t->defined() && t->sizes() == sizes, "input " << t->sizes() << " vs " << sizes);
  }
  if (in.ref_logprobs.defined()) {
    LOOM_CHECK(in.ref_logprobs.sizes() == sizes, "ref_logprobs " << in.ref_logprobs.sizes());
  }
}

double Share(const at::Tensor& flags, const at::Tensor& weights, int64_t count) {
  return count == 0 ? 0.0 : (flags.to(at::kFloat) * weights).sum().item<double>() / count;
}

}  // namespace

at::Tensor PolicyTokenWeights(const at::Tensor& loss_mask, const at::Tensor& versions,
                              int64_t policy_version, int64_t mask_lag) {
  at::Tensor weights = loss_mask.to(at::kFloat);
  if (mask_lag < 0) return weights;
  const at::Tensor fresh = (policy_version - versions) <= mask_lag;
  return weights * fresh.to(at::kFloat);
}

int64_t WeightedTokens(const std::vector<uint8_t>& loss_mask, const std::vector<int64_t>& versions,
                       int64_t policy_version, int64_t mask_lag) {
  const auto targets = static_cast<int64_t>(loss_mask.size()) - 1;
  if (targets <= 0) return 0;
  // Views of the caller's vectors, read only.
  const at::Tensor mask =
      at::from_blob(const_cast<uint8_t*>(loss_mask.data()) + 1, {targets}, at::kByte);
  const at::Tensor token_versions =
      at::from_blob(const_cast<int64_t*>(versions.data()) + 1, {targets}, at::kLong);
  return static_cast<int64_t>(
      PolicyTokenWeights(mask, token_versions, policy_version, mask_lag).sum().item<double>());
}

PolicyLossResult PolicyLoss(const PolicyLossInputs& in, const PolicyLossOptions& options) {
  CheckShapes(in);
  PolicyLossResult result;
  const at::Tensor mask = in.loss_mask.to(at::kFloat);
  const at::Tensor weights =
      PolicyTokenWeights(in.loss_mask, in.versions, options.policy_version, options.mask_lag);
  result.loss_tokens = static_cast<int64_t>(mask.sum().item<double>());
  result.weighted_tokens = static_cast<int64_t>(weights.sum().item<double>());
  result.masked_fraction =
      result.loss_tokens == 0
          ? 0.0
          : 1.0 - static_cast<double>(result.weighted_tokens) / result.loss_tokens;

  const at::Tensor ratio = (in.logprobs - in.behaviour_logprobs).exp();
  const at::Tensor unclipped = ratio * in.advantages;
  const at::Tensor clipped =
      ratio.clamp(1.0 - options.clip_low, 1.0 + options.clip_high) * in.advantages;
  at::Tensor per_token = -at::min(unclipped, clipped);
  if (in.ref_logprobs.defined()) {
    const at::Tensor delta = in.ref_logprobs - in.logprobs;
    const at::Tensor kl = delta.exp() - delta - 1.0;
    result.kl = Share(kl.detach(), weights, result.weighted_tokens);
    if (options.kl_coef != 0.0) per_token = per_token + options.kl_coef * kl;
  }
  const double normalizer = options.normalizer > 0
                                ? options.normalizer
                                : static_cast<double>(std::max<int64_t>(1, result.weighted_tokens));
  // where() keeps inf/NaN of unweighted tokens (e.g. padding) out of the sum.
  const at::Tensor weighted =
      at::where(weights > 0, per_token * weights, at::zeros_like(per_token));
  result.loss = weighted.sum() / normalizer;
  result.clip_fraction = Share((clipped < unclipped).detach(), weights, result.weighted_tokens);
  result.mean_ratio = Share(ratio.detach(), weights, result.weighted_tokens);
  return result;
}

}  // namespace loom::algo
