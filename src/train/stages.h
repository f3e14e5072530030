#pragma once
// The stage registry: the stages `train.stages` can name. Each runs one kind
// of training on the run's shared context, starting from the weights the
// previous stage left, and keeps its place in checkpoints under its name
// (RunCursor::stage and its own cursor: SftCursor, GrpoCursor).

#include <string>

#include "absl/status/status.h"
#include "train/context.h"

namespace loom::train {

struct StageKind {
  const char* name;
  absl::Status (*run)(TrainContext& context);
  int64_t (*steps)(const config::RunConfig& config);  // its optimizer steps
};

// The registered stage called `name`, or null.
const StageKind* FindStage(const std::string& name);

// Optimizer steps of every stage of `config` (unknown stages count 0).
int64_t TotalSteps(const config::RunConfig& config);

}  // namespace loom::train
