#pragma once
// SFT loss: mean negative log-likelihood of the tokens the mask selects
// (assistant tokens, reasoning included; prompt and environment tokens are
// masked out). Works on the packed [T] log-probs Transformer::Score returns.
//
// Pure function; autograd flows through `logprobs`.

#include <ATen/ATen.h>

#include <cstdint>

namespace loom::algo {

struct SftLossResult {
  at::Tensor loss;      // [] float32, differentiable
  int64_t tokens = 0;   // tokens in the mask
  double mean_nll = 0;  // loss value per masked token (= loss unless a normalizer is given)
};

// logprobs: [T] float32 log p(target_t); loss_mask: [T] bool or float (1 = train on it).
// normalizer: 0 = the masked token count of this call; else divide by it
// (one mean across micro-batches).
SftLossResult SftLoss(const at::Tensor& logprobs, const at::Tensor& loss_mask,
                      double normalizer = 0.0);

}  // namespace loom::algo
