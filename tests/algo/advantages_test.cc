// Subgroup advantages against hand-computed values.

#include "loom/algo/advantages.h"

#include <gtest/gtest.h>

namespace loom::algo {
namespace {

std::vector<float> Values(const at::Tensor& t) {
  at::Tensor c = t.contiguous().to(at::kFloat);
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// Interleaved subgroups:
//   id 10: rewards 1, 0, 0, 1 -> mean 0.5, deviations +-0.5, std 0.5
//   id 3:  rewards 1, 1      -> all equal: 0
//   id 5:  reward 2          -> alone: 0
//   id 8:  rewards 0, 3      -> mean 1.5, deviations -+1.5, std 1.5
const std::vector<float> kRewards = {1, 1, 0, 2, 0, 0, 1, 3, 1};
const std::vector<int64_t> kGroups = {10, 3, 10, 5, 10, 8, 10, 8, 3};

TEST(AdvantagesTest, CentredOnOwnSubgroupMean) {
  auto adv = Values(SubgroupAdvantages(at::tensor(kRewards), at::tensor(kGroups), false));
  const std::vector<float> want = {0.5, 0, -0.5, 0, -0.5, -1.5, 0.5, 1.5, 0};
  ASSERT_EQ(adv.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(adv[i], want[i], 1e-6) << i;
}

TEST(AdvantagesTest, ScaledByOwnSubgroupStd) {
  auto adv = Values(SubgroupAdvantages(at::tensor(kRewards), at::tensor(kGroups), true, 0.0));
  const std::vector<float> want = {1, 0, -1, 0, -1, -1, 1, 1, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(adv[i], want[i], 1e-6) << i;
}

TEST(AdvantagesTest, EffortsAreNeverCompared) {
  // Same prompt, two efforts: effort A all 1, effort B all 0. Pooled, A would
  // look good and B bad; per subgroup both are 0.
  auto adv = Values(SubgroupAdvantages(at::tensor(std::vector<float>{1, 1, 0, 0}),
                                       at::tensor(std::vector<int64_t>{0, 0, 1, 1}), true));
  for (float a : adv) EXPECT_EQ(a, 0.0f);
}

TEST(AdvantagesTest, ExpandToTokensRepeatsPerSequence) {
  auto tokens = Values(ExpandToTokens(at::tensor(std::vector<float>{2, -1, 4}), {2, 1, 3}));
  EXPECT_EQ(tokens, (std::vector<float>{2, 2, -1, 4, 4, 4}));
}

}  // namespace
}  // namespace loom::algo
