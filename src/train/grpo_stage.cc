#include "train/grpo_stage.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "loom/algo/length_reward.h"
#include "train/async_stage.h"
#include "train/grpo_step.h"

namespace loom::train {
namespace {

// The frozen model of the KL penalty: the weights this stage started from, as
// saved on disk (the previous stage's output, or model.path when GRPO comes
// first), so a resumed run anchors to the same weights. Null when
// grpo.kl_coef is 0.
absl::StatusOr<std::unique_ptr<model::Transformer>> LoadReference(const TrainContext& context) {
  const config::RunConfig& config = context.config;
  if (config.grpo.kl_coef <= 0) return nullptr;
  const auto& stages = config.train.stages;
  const auto grpo = std::find(stages.begin(), stages.end(), kGrpoStage);
  const std::string dir =
      grpo == stages.begin() ? config.model.path : context.run_dir.stage_path(*std::prev(grpo));
  spdlog::info("grpo.kl_coef {}: KL reference from {}", config.grpo.kl_coef, dir);
  return model::Transformer::Load(dir, {context.model.dtype(), context.model.device(), false});
}

}  // namespace

absl::Status RunGrpoStage(TrainContext& context) {
  const config::RunConfig& config = context.config;
  auto reference = LoadReference(context);
  if (!reference.ok()) return reference.status();
  AsyncStageSpec spec;
  spec.stage = kGrpoStage;
  spec.optimizer = &config.train.grpo;
  spec.headline = "reward_mean";
  spec.make_trainer =
      [&](StageOptimizer& optimizer) -> absl::StatusOr<std::unique_ptr<BatchTrainer>> {
    return std::make_unique<GrpoTrainer>(
        context.step_inputs(), optimizer,
        algo::EffortLengthReward(config.grpo.length_reward, config.effort.levels),
        context.special_tokens.think_end, reference->get());
  };
  return RunAsyncStage(context, spec);
}

}  // namespace loom::train
