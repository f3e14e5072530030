// SFT loss: mean NLL of masked tokens only, and its gradient.

#include "loom/algo/sft_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace loom::algo {
namespace {

TEST(SftLossTest, MeanNllOverMaskedTokensOnly) {
  at::Tensor logp = at::tensor(std::vector<double>{-0.5, -2.0, -1.0, -4.0}).requires_grad_(true);
  at::Tensor mask = at::tensor(std::vector<int64_t>{0, 1, 1, 0}).to(at::kBool);
  auto result = SftLoss(logp, mask);
  EXPECT_EQ(result.tokens, 2);
  EXPECT_NEAR(result.loss.item<double>(), 1.5, 1e-12);
  EXPECT_NEAR(result.mean_nll, 1.5, 1e-12);
  result.loss.backward();
  std::vector<double> want = {0, -0.5, -0.5, 0};
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(logp.grad()[i].item<double>(), want[i]);
}

TEST(SftLossTest, InfiniteLogProbOutsideTheMaskIsIgnored) {
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor logp = at::tensor(std::vector<double>{-inf, -2.0});
  auto result = SftLoss(logp, at::tensor(std::vector<double>{0, 1}));
  EXPECT_DOUBLE_EQ(result.loss.item<double>(), 2.0);
}

TEST(SftLossTest, NormalizerSpansMicroBatches) {
  at::Tensor logp = at::tensor(std::vector<double>{-1.0, -3.0});
  auto result = SftLoss(logp, at::ones({2}), 8.0);
  EXPECT_DOUBLE_EQ(result.loss.item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(result.mean_nll, 2.0);
}

}  // namespace
}  // namespace loom::algo
