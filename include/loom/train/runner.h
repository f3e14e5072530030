#pragma once
// RunTraining: everything `loom train` does after the config is valid —
// create the model if the config describes one and it is absent, load it
// with its tokenizer and the datasets, then run the configured stages in
// order (each from the previous one's weights), saving each stage's final
// weights in the Hugging Face layout under RUN_DIR/stages/<stage>/.
//
// `resume` is "" (fresh), "auto" or a checkpoint directory (checkpointer.h):
// the run continues inside the stage the checkpoint was written in. After a
// preemption signal the status is PreemptedStatus() (preemption.h).
//
// With `rank` from a multi-rank launch (dist/rank.h) the run first joins the
// other ranks (dist.timeout_s), every rank starts from rank 0's weights, and
// the stages train data-parallel; rank 0 writes checkpoints and stages/.

#include <string>

#include "absl/status/status.h"
#include "loom/config/run_config.h"
#include "loom/dist/rank.h"
#include "loom/train/run_dir.h"

namespace loom::train {

absl::Status RunTraining(const config::RunConfig& config, const RunDir& run_dir,
                         const std::string& resume = "", const dist::RankInfo& rank = {});

}  // namespace loom::train
