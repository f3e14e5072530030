#include "loom/train/stage_optimizer.h"

#include <chrono>

namespace loom::train {

StageOptimizer::StageOptimizer(const model::Transformer& model,
                               const config::OptimizerFields& fields, dist::Group* group,
                               int64_t bucket_bytes)
    : fields_(fields),
      adamw_(model.NamedParameters(),
             {fields.beta1, fields.beta2, fields.eps, fields.weight_decay}),
      parameters_(model.Parameters()),
      group_(group),
      bucket_bytes_(bucket_bytes) {}

absl::StatusOr<StageOptimizer::Applied> StageOptimizer::Step(int64_t step) {
  Applied applied;
  if (group_ != nullptr && group_->size() > 1) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = dist::AllReduceGradients(*group_, parameters_, bucket_bytes_); !s.ok()) {
      return s;
    }
    applied.allreduce_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  applied.grad_norm = adamw_.ClipGradNorm(fields_.grad_clip);
  applied.lr =
      WarmupCosineLr(fields_.lr, step, fields_.steps, fields_.warmup_steps, fields_.min_lr_ratio);
  adamw_.Step(applied.lr);
  adamw_.ZeroGrad();
  return applied;
}

void StageOptimizer::AddRankFigures(const Applied& applied, nlohmann::json& record) const {
  if (group_ == nullptr || group_->size() == 1) return;
  record["ranks"] = group_->size();
  record["allreduce_seconds"] = applied.allreduce_seconds;
  record["weights_checksum"] = dist::ParametersChecksum(parameters_);
}

}  // namespace loom::train
