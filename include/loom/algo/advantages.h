#pragma once
// GRPO advantages over (prompt, effort) subgroups.
//
// Each response's advantage is its reward minus the mean reward of its own
// subgroup, optionally divided by that subgroup's standard deviation
// (population std, plus `eps`). Responses of different subgroups, and so of
// different efforts, are never compared. A subgroup of one response, or one
// whose rewards are all equal, gets advantage 0.
//
// Pure functions; CPU or any device.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace loom::algo {

// rewards:   [N] float32 total reward of each response
// subgroups: [N] int64   subgroup id of each response (any values)
// returns    [N] float32 advantages
at::Tensor SubgroupAdvantages(const at::Tensor& rewards, const at::Tensor& subgroups,
                              bool scale_by_std, double eps = 1e-6);

// Spreads one value per sequence over its tokens, for packed batches.
// per_sequence: [N]; lengths: N tokens counts summing to T; returns [T].
at::Tensor ExpandToTokens(const at::Tensor& per_sequence, const std::vector<int64_t>& lengths);

}  // namespace loom::algo
