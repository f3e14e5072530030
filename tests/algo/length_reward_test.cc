// The effort-conditioned length reward against its closed form, worked by hand.

#include "loom/algo/length_reward.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::algo {
namespace {

config::LengthRewardSection Params(double k0, double c_max, double l_norm, double lambda) {
  config::LengthRewardSection p;
  p.k0 = k0;
  p.c_max = c_max;
  p.l_norm = l_norm;
  p.lambda = lambda;
  return p;
}

TEST(LengthRewardTest, MatchesClosedForm) {
  // B = {25, 50, 75, 100}: b_min 25, mean gap 25, tau = 2 * 25 = 50.
  EffortLengthReward reward(Params(0.5, 1.0, 256, 2.0), {25, 50, 75, 100});
  EXPECT_DOUBLE_EQ(reward.tau(), 50.0);
  EXPECT_DOUBLE_EQ(reward.Coefficient(25), 0.5);
  EXPECT_DOUBLE_EQ(reward.Coefficient(75), 0.5 * std::exp(-1.0));
  // k(75) * 300 / 256 = 0.18393972 * 1.171875 = 0.21555436.
  EXPECT_NEAR(reward.Reward(75, 300), -0.21555436, 1e-8);
  EXPECT_NEAR(reward.Reward(100, 100), -0.5 * std::exp(-1.5) * 100 / 256, 1e-12);
  EXPECT_EQ(reward.Reward(50, 0), 0.0);
}

TEST(LengthRewardTest, PenaltyIsCappedAtCmax) {
  EffortLengthReward reward(Params(0.5, 0.3, 256, 2.0), {25, 50, 75, 100});
  EXPECT_DOUBLE_EQ(reward.Reward(25, 100000), -0.3);
  EXPECT_NEAR(reward.Reward(25, 128), -0.25, 1e-12);  // 0.5 * 128 / 256, under the cap
}

TEST(LengthRewardTest, LevelOrderDoesNotMatterAndGapIsTheMean) {
  // Sorted {10, 20, 70}: gaps 10 and 50, mean 30; tau = 0.5 * 30 = 15.
  EffortLengthReward reward(Params(1.0, 10, 100, 0.5), {70, 10, 20});
  EXPECT_DOUBLE_EQ(reward.tau(), 15.0);
  EXPECT_EQ(reward.min_effort(), 10);
  EXPECT_DOUBLE_EQ(reward.Coefficient(40), std::exp(-2.0));
}

TEST(LengthRewardTest, SingleLevelHasConstantCoefficientAndZeroK0IsOff) {
  EXPECT_DOUBLE_EQ(EffortLengthReward(Params(0.2, 1, 100, 1), {60}).Coefficient(60), 0.2);
  EXPECT_EQ(EffortLengthReward(Params(0.0, 1, 100, 1), {25, 100}).Reward(25, 999), 0.0);
}

TEST(LengthRewardTest, ReasoningLengthCountsTokensBeforeThinkEnd) {
  const int64_t kEnd = 300;
  EXPECT_EQ(ReasoningLength({5, 6, 7, kEnd, 8, 9}, kEnd), 3);
  EXPECT_EQ(ReasoningLength({kEnd, 8}, kEnd), 0);
  EXPECT_EQ(ReasoningLength({5, 6}, kEnd), 2);  // never closed: all reasoning
}

}  // namespace
}  // namespace loom::algo
