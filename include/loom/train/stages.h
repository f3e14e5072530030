#pragma once
// The stage registry: the stages `train.stages` can name. Each runs one kind
// of training on the run's shared context, starting from the weights the
// previous stage left, and keeps its place in checkpoints under its name
// (RunCursor::stage and its own cursor: SftCursor, GrpoCursor).

#include <string>

#include "absl/status/status.h"
#include "loom/train/context.h"

namespace loom::train {

struct StageKind {
  const char* name;
  absl::Status (*run)(TrainContext& context);
};

// The registered stage called `name`, or null.
const StageKind* FindStage(const std::string& name);

}  // namespace loom::train
