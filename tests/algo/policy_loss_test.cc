// The clipped policy loss: its value against a scalar re-implementation of
// the formula, and its autograd gradient against central finite differences
// of that scalar function; stale masking and the reported fractions.

#include "loom/algo/policy_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace loom::algo {
namespace {

struct Case {
  std::vector<double> logp, behaviour, adv, mask, ref;
  std::vector<int64_t> versions;
  PolicyLossOptions options;
};

// The loss, written out token by token (independent of the tensor code).
double ScalarLoss(const Case& c, const std::vector<double>& logp) {
  double sum = 0, count = 0;
  for (size_t t = 0; t < logp.size(); ++t) {
    const bool stale =
        c.options.mask_lag >= 0 && c.options.policy_version - c.versions[t] > c.options.mask_lag;
    const double w = stale ? 0.0 : c.mask[t];
    const double ratio = std::exp(logp[t] - c.behaviour[t]);
    const double clipped =
        std::clamp(ratio, 1 - c.options.clip_low, 1 + c.options.clip_high) * c.adv[t];
    double term = -std::min(ratio * c.adv[t], clipped);
    if (!c.ref.empty()) {
      const double d = c.ref[t] - logp[t];
      term += c.options.kl_coef * (std::exp(d) - d - 1);
    }
    sum += w * term;
    count += w;
  }
  return sum / std::max(1.0, count);
}

at::Tensor T(const std::vector<double>& v) { return at::tensor(v, at::kDouble); }

PolicyLossResult RunLoss(const Case& c, at::Tensor* grad) {
  PolicyLossInputs in;
  in.logprobs = T(c.logp).requires_grad_(true);
  in.behaviour_logprobs = T(c.behaviour);
  in.advantages = T(c.adv);
  in.loss_mask = T(c.mask);
  in.versions = at::tensor(c.versions, at::kLong);
  if (!c.ref.empty()) in.ref_logprobs = T(c.ref);
  PolicyLossResult result = PolicyLoss(in, c.options);
  result.loss.backward();
  *grad = in.logprobs.grad();
  return result;
}

Case MixedCase() {
  Case c;
  // Tokens: inside the clip range, ratio above 1+eps with A>0 (clipped, no
  // grad), ratio below 1-eps with A<0 (clipped), ratio above with A<0 (not
  // clipped), a prompt token (mask 0), a stale token (lag 3 > 1).
  c.logp = {-1.0, -0.5, -2.0, -0.7, -1.3, -0.9, -1.1};
  c.behaviour = {-1.1, -1.0, -1.5, -1.2, -1.3, -1.0, -1.0};
  c.adv = {0.7, 1.2, -0.8, -0.6, 0.4, 1.0, -0.3};
  c.mask = {1, 1, 1, 1, 0, 1, 1};
  c.versions = {5, 5, 4, 5, 5, 2, 4};
  c.ref = {-1.05, -0.6, -1.9, -0.8, -1.3, -1.0, -1.2};
  c.options.clip_low = 0.2;
  c.options.clip_high = 0.28;
  c.options.policy_version = 5;
  c.options.mask_lag = 1;
  c.options.kl_coef = 0.1;
  return c;
}

TEST(PolicyLossTest, ValueMatchesScalarFormula) {
  Case c = MixedCase();
  at::Tensor grad;
  auto result = RunLoss(c, &grad);
  EXPECT_NEAR(result.loss.item<double>(), ScalarLoss(c, c.logp), 1e-12);
}

TEST(PolicyLossTest, GradientMatchesFiniteDifferences) {
  Case c = MixedCase();
  at::Tensor grad;
  RunLoss(c, &grad);
  const double h = 1e-6;
  for (size_t t = 0; t < c.logp.size(); ++t) {
    std::vector<double> up = c.logp, down = c.logp;
    up[t] += h;
    down[t] -= h;
    const double numeric = (ScalarLoss(c, up) - ScalarLoss(c, down)) / (2 * h);
    EXPECT_NEAR(grad[t].item<double>(), numeric, 1e-7) << "token " << t;
  }
  // Clipped, prompt and stale tokens get no policy gradient; the KL term
  // still pulls clipped tokens, so compare without it.
  c.options.kl_coef = 0;
  RunLoss(c, &grad);
  for (int t : {1, 2, 4, 5}) EXPECT_EQ(grad[t].item<double>(), 0.0) << "token " << t;
  EXPECT_NE(grad[0].item<double>(), 0.0);
}

TEST(PolicyLossTest, ReportsMaskedAndClippedFractions) {
  Case c = MixedCase();
  at::Tensor grad;
  auto result = RunLoss(c, &grad);
  EXPECT_EQ(result.loss_tokens, 6);
  EXPECT_EQ(result.weighted_tokens, 5);
  EXPECT_NEAR(result.masked_fraction, 1.0 / 6, 1e-12);
  EXPECT_NEAR(result.clip_fraction, 2.0 / 5, 1e-12);  // tokens 1 and 2
  EXPECT_GT(result.kl, 0);
}

TEST(PolicyLossTest, MaskLagMinusOneKeepsStaleTokens) {
  Case c = MixedCase();
  c.options.mask_lag = -1;
  at::Tensor grad;
  auto result = RunLoss(c, &grad);
  EXPECT_EQ(result.weighted_tokens, 6);
  EXPECT_EQ(result.masked_fraction, 0.0);
  EXPECT_NEAR(result.loss.item<double>(), ScalarLoss(c, c.logp), 1e-12);
}

TEST(PolicyLossTest, OnPolicyRatioOneGivesMinusMeanAdvantage) {
  // logp == behaviour: ratio 1 everywhere, loss = -mean(A) over weighted tokens.
  Case c;
  c.logp = c.behaviour = {-1, -2, -3};
  c.adv = {1, 2, 6};
  c.mask = {1, 1, 1};
  c.versions = {0, 0, 0};
  at::Tensor grad;
  auto result = RunLoss(c, &grad);
  EXPECT_NEAR(result.loss.item<double>(), -3.0, 1e-12);
  EXPECT_EQ(result.clip_fraction, 0.0);
  EXPECT_NEAR(result.mean_ratio, 1.0, 1e-12);
}

TEST(PolicyLossTest, NormalizerGivesOneMeanAcrossMicroBatches) {
  Case c = MixedCase();
  c.options.normalizer = 50;
  at::Tensor grad;
  auto result = RunLoss(c, &grad);
  EXPECT_NEAR(result.loss.item<double>(), ScalarLoss(c, c.logp) * 5 / 50, 1e-12);
}

}  // namespace
}  // namespace loom::algo
