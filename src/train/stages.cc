#include "loom/train/stages.h"

#include "loom/train/grpo_stage.h"
#include "loom/train/opd_stage.h"
#include "loom/train/sft_stage.h"

namespace loom::train {
namespace {

constexpr StageKind kStages[] = {
    {kSftStage, RunSftStage},
    {kGrpoStage, RunGrpoStage},
    {kOpdStage, RunOpdStage},
};

}  // namespace

const StageKind* FindStage(const std::string& name) {
  for (const StageKind& kind : kStages) {
    if (name == kind.name) return &kind;
  }
  return nullptr;
}

}  // namespace loom::train
