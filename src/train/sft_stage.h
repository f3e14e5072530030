#pragma once
// The SFT stage: next-token loss on the reference answers (reasoning
// included) of the datasets' training problems, AdamW with warm-up + cosine
// decay and gradient clipping, greedy evaluation every `tasks.eval_every`
// steps and at the end. One metrics.jsonl line per step and per evaluation.

#include "absl/status/status.h"
#include "train/context.h"

namespace loom::train {

inline constexpr char kSftStage[] = "sft";

absl::Status RunSftStage(TrainContext& context);

}  // namespace loom::train
