#pragma once
// What the async stages (grpo, opd) share around the one AsyncLoop: the
// engine port that admits prompt groups (recording every sample, with its
// dataset's teacher, in the sample table), agent episodes for sandbox
// datasets, checkpoints with in-flight samples and exact resume, the
// per-step report (metrics line, progress line, one samples.jsonl line per
// trained sample, held-out evaluation every `tasks.eval_every` steps and at
// the end), and live changes (control.h) between engine steps: a new mix
// reaches the dispatcher at once, new teachers the next dispatch. A stage
// differs only in its trainer and its optimizer section.
//
// One thread (the caller's) does all of it.

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "loom/config/train_section.h"
#include "loom/train/async_loop.h"
#include "loom/train/stage_optimizer.h"
#include "train/context.h"

namespace loom::train {

struct AsyncStageSpec {
  const char* stage;                         // kGrpoStage, kOpdStage
  const config::OptimizerFields* optimizer;  // the stage's section of train:
  const char* headline;                      // the metrics key the progress line shows
  bool teachers = false;                     // samples get their dataset's teacher slot (live)
  // Builds the stage's trainer around its optimizer.
  std::function<absl::StatusOr<std::unique_ptr<BatchTrainer>>(StageOptimizer&)> make_trainer;
};

absl::Status RunAsyncStage(TrainContext& context, const AsyncStageSpec& spec);

}  // namespace loom::train
