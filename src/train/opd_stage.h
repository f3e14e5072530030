#pragma once
// The opd stage: on-policy distillation on the one async loop
// (async_stage.h) with the OPD trainer (opd_step.h). The student samples its
// own responses under the same dispatch, interruption, KV resume, staleness
// bound and checkpoints as GRPO; each sample is distilled from its dataset's
// teacher (tasks.datasets[].teacher).
//
// The teachers are prepared and checked when the run starts, not when the
// stage does (OpenTeachers): a teacher that is missing, or whose vocabulary
// differs from the student's, stops the run before its first step.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/algo/teacher_pool.h"
#include "loom/config/run_config.h"
#include "loom/model/transformer.h"
#include "loom/tokenizer/tokenizer.h"
#include "train/context.h"

namespace loom::train {

inline constexpr char kOpdStage[] = "opd";

// The run's teacher pool over `slots` (LiveConfig::teacher_slots: the
// config's teachers, or a resumed run's slots), or null when train.stages
// has no opd. A teacher whose path holds no model but which names a
// companion `config` in opd.teachers is made
// first by `loom train --config CONFIG --resume auto` in a child process
// (its output streams through; a preemption signal is passed on to it, and
// the status is then PreemptedStatus); every teacher is then checked against the
// student's vocabulary and the memory budget (TeacherPool::Open).
absl::StatusOr<std::unique_ptr<algo::TeacherPool>> OpenTeachers(
    const config::RunConfig& config, const std::vector<algo::TeacherSpec>& slots,
    int64_t vocab_size, const tokenizer::Tokenizer& tokenizer, const model::LoadOptions& device);

absl::Status RunOpdStage(TrainContext& context);

}  // namespace loom::train
