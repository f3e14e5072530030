#include "loom/algo/length_reward.h"

#include <algorithm>
#include <cmath>

#include "loom/config/check.h"

namespace loom::algo {

EffortLengthReward::EffortLengthReward(const config::LengthRewardSection& params,
                                       std::vector<int> levels)
    : params_(params) {
  LOOM_CHECK(!levels.empty(), "no effort levels");
  std::sort(levels.begin(), levels.end());
  min_effort_ = levels.front();
  if (levels.size() > 1) {
    const double mean_gap = static_cast<double>(levels.back() - levels.front()) /
                            static_cast<double>(levels.size() - 1);
    tau_ = params.lambda * mean_gap;
  }
}

double EffortLengthReward::Coefficient(int effort) const {
  if (tau_ <= 0) return params_.k0;
  return params_.k0 * std::exp(-(effort - min_effort_) / tau_);
}

double EffortLengthReward::Reward(int effort, int64_t reasoning_tokens) const {
  const double penalty =
      Coefficient(effort) * static_cast<double>(reasoning_tokens) / params_.l_norm;
  return -std::min(params_.c_max, penalty);
}

int64_t ReasoningLength(const std::vector<int64_t>& completion, int64_t think_end_id) {
  auto end = std::find(completion.begin(), completion.end(), think_end_id);
  return end - completion.begin();
}

}  // namespace loom::algo
