#pragma once
// The GRPO stage: the async loop (async_loop.h) with the GRPO trainer
// (grpo_step.h) — verifier and length rewards, subgroup advantages, the
// clipped policy loss against the recorded behaviour log-probs — plus agent
// episodes for sandbox datasets, checkpoints with in-flight samples, and
// held-out evaluation every `tasks.eval_every` steps and at the end.
//
// One thread (the caller's) does all of it; the engine and the optimizer
// never see another thread.

#include "absl/status/status.h"
#include "train/context.h"

namespace loom::train {

inline constexpr char kGrpoStage[] = "grpo";

absl::Status RunGrpoStage(TrainContext& context);

}  // namespace loom::train
