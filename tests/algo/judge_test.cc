// The step judge's pieces against hand-worked values and a direct count:
// rewards are the task's plus the length reward, multi-turn reasoning counts
// each turn's tokens before its </think>, and the weighted-token count is
// the policy loss's token weights summed.

#include "loom/algo/judge.h"

#include <gtest/gtest.h>

#include <random>

#include "loom/algo/policy_loss.h"

namespace loom::algo {
namespace {

TEST(JudgeTest, RewardsAreTheTasksPlusTheLengthRewards) {
  config::LengthRewardSection params;
  params.k0 = 0.5;
  params.c_max = 1.0;
  params.l_norm = 100;
  params.lambda = 1.0;
  const EffortLengthReward length(params, {1});  // one level: k(b) = k0
  std::vector<Verdict> verdicts(3);
  verdicts[0].judgement.reward = 1;
  verdicts[0].reasoning_tokens = 40;  // 0.5 * 40 / 100 = 0.2
  verdicts[1].judgement.reward = 0;
  verdicts[1].reasoning_tokens = 1000;  // capped at 1
  verdicts[2].judgement.reward = 0.5;
  const Rewards with = RewardBatch(verdicts, &length);
  EXPECT_EQ(with.task, (std::vector<float>{1, 0, 0.5}));
  EXPECT_EQ(with.length, (std::vector<float>{-0.2f, -1, 0}));
  EXPECT_EQ(with.total, (std::vector<float>{0.8f, -1, 0.5}));
  const Rewards without = RewardBatch(verdicts, nullptr);
  EXPECT_EQ(without.total, without.task);
  EXPECT_EQ(without.length, (std::vector<float>{0, 0, 0}));
}

TEST(JudgeTest, MultiTurnReasoningCountsEachTurnBeforeItsThinkEnd) {
  const int64_t think_end = 9;
  // prompt (2) | turn: 3 reasoning, </think>, 2 answer | tool (mask 0) 2 | turn: 1, </think>, 1
  const std::vector<int64_t> tokens{1, 1, 5, 5, 5, 9, 6, 6, 7, 7, 5, 9, 6};
  const std::vector<uint8_t> mask{0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1};
  EXPECT_EQ(MultiTurnReasoningLength(tokens, mask, 2, think_end), 4);
  // Without the token every generated one counts: 6 + 3.
  EXPECT_EQ(MultiTurnReasoningLength(tokens, mask, 2, -1), 9);
  // A turn that never closes its reasoning counts whole.
  EXPECT_EQ(MultiTurnReasoningLength({1, 5, 5, 5}, {0, 1, 1, 1}, 1, think_end), 3);
}

TEST(JudgeTest, WeightedTokensAreThePolicyWeightsOfTheTargets) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t length = 1 + rng() % 40;
    std::vector<uint8_t> mask(length);
    std::vector<int64_t> versions(length);
    for (size_t t = 0; t < length; ++t) {
      mask[t] = rng() % 3 != 0;
      versions[t] = mask[t] ? static_cast<int64_t>(rng() % 6) : -1;
    }
    for (int64_t lag : {-1, 0, 2}) {
      int64_t expected = 0;  // tokens after the first, generated, at most `lag` behind 5
      for (size_t t = 1; t < length; ++t) {
        expected += mask[t] && (lag < 0 || 5 - versions[t] <= lag);
      }
      EXPECT_EQ(WeightedTokens(mask, versions, 5, lag), expected) << trial << " lag " << lag;
    }
  }
}

}  // namespace
}  // namespace loom::algo
