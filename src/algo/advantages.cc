#include "loom/algo/advantages.h"

#include "loom/config/check.h"

namespace loom::algo {

at::Tensor SubgroupAdvantages(const at::Tensor& rewards, const at::Tensor& subgroups,
                              bool scale_by_std, double eps) {
  LOOM_CHECK(rewards.dim() == 1 && subgroups.dim() == 1 && rewards.size(0) == subgroups.size(0),
             "rewards " << rewards.sizes() << " and subgroups " << subgroups.sizes());
  const at::Tensor r = rewards.to(at::kDouble);
  // Dense subgroup indices 0..G-1.
  auto [unique, inverse, counts] = at::_unique2(subgroups, /*sorted=*/true,
                                                /*return_inverse=*/true, /*return_counts=*/true);
  const int64_t groups = unique.size(0);
  const at::Tensor n = counts.to(at::kDouble);
  const at::Tensor mean = at::zeros({groups}, r.options()).index_add_(0, inverse, r) / n;
  at::Tensor centred = r - mean.index_select(0, inverse);
  if (scale_by_std) {
    const at::Tensor var =
        at::zeros({groups}, r.options()).index_add_(0, inverse, centred * centred) / n;
    const at::Tensor std = var.sqrt().index_select(0, inverse);
    // Equal rewards (std 0) keep advantage 0 even with eps 0.
    centred = centred / at::where(std > 0, std + eps, at::ones_like(std));
  }
  return centred.to(at::kFloat);
}

at::Tensor ExpandToTokens(const at::Tensor& per_sequence, const std::vector<int64_t>& lengths) {
  LOOM_CHECK(
      per_sequence.dim() == 1 && per_sequence.size(0) == static_cast<int64_t>(lengths.size()),
      "values " << per_sequence.sizes() << " for " << lengths.size() << " sequences");
  const at::Tensor repeats = at::tensor(lengths, at::kLong).to(per_sequence.device());
  return per_sequence.repeat_interleave(repeats);
}

}  // namespace loom::algo
