#include "train/stages.h"

#include "train/grpo_stage.h"
#include "train/opd_stage.h"
#include "train/sft_stage.h"

namespace loom::train {
namespace {

constexpr StageKind kStages[] = {
    {kSftStage, RunSftStage, [](const config::RunConfig& c) { return c.train.sft.steps; }},
    {kGrpoStage, RunGrpoStage, [](const config::RunConfig& c) { return c.train.grpo.steps; }},
    {kOpdStage, RunOpdStage, [](const config::RunConfig& c) { return c.train.opd.steps; }},
};

}  // namespace

const StageKind* FindStage(const std::string& name) {
  for (const StageKind& kind : kStages) {
    if (name == kind.name) return &kind;
  }
  return nullptr;
}

int64_t TotalSteps(const config::RunConfig& config) {
  int64_t total = 0;
  for (const std::string& stage : config.train.stages) {
    if (const StageKind* kind = FindStage(stage)) total += kind->steps(config);
  }
  return total;
}

}  // namespace loom::train
