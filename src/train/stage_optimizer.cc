#include "loom/train/stage_optimizer.h"

namespace loom::train {

StageOptimizer::StageOptimizer(const model::Transformer& model,
                               const config::OptimizerFields& fields)
    : fields_(fields),
      adamw_(model.NamedParameters(),
             {fields.beta1, fields.beta2, fields.eps, fields.weight_decay}) {}

StageOptimizer::Applied StageOptimizer::Step(int64_t step, int64_t& policy_version) {
  Applied applied;
  applied.grad_norm = adamw_.ClipGradNorm(fields_.grad_clip);
  applied.lr =
      WarmupCosineLr(fields_.lr, step, fields_.steps, fields_.warmup_steps, fields_.min_lr_ratio);
  adamw_.Step(applied.lr);
  adamw_.ZeroGrad();
  ++policy_version;
  return applied;
}

}  // namespace loom::train
