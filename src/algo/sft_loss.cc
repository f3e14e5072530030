#include "loom/algo/sft_loss.h"

#include <algorithm>

#include "loom/config/check.h"

namespace loom::algo {

SftLossResult SftLoss(const at::Tensor& logprobs, const at::Tensor& loss_mask, double normalizer) {
  LOOM_CHECK(logprobs.dim() == 1 && loss_mask.sizes() == logprobs.sizes(),
             "logprobs " << logprobs.sizes() << " vs mask " << loss_mask.sizes());
  const at::Tensor mask = loss_mask.to(at::kFloat);
  SftLossResult result;
  result.tokens = static_cast<int64_t>(mask.sum().item<double>());
  // where(), not a product: a -inf log-prob outside the mask must not turn the sum into NaN.
  const at::Tensor nll_sum = -at::where(mask > 0, logprobs, at::zeros_like(logprobs)).sum();
  const double count = static_cast<double>(std::max<int64_t>(1, result.tokens));
  result.loss = nll_sum / (normalizer > 0 ? normalizer : count);
  result.mean_nll = nll_sum.item<double>() / count;
  return result;
}

}  // namespace loom::algo
