#pragma once
// The stages' side of checkpoints: capturing a stage's state into a TrainState
// at a boundary, giving it back to continue, and restoring it on resume. Each
// stage calls one hook per boundary; the Checkpointer decides whether to save.
//
// Async stages (grpo, opd) capture between engine steps (a token boundary): the engine is
// parked and every in-flight sample exported with its KV on the host; after a
// periodic save they are imported back in id order — the order they were
// added in, which the engine's admission and batch order follow — so the run
// continues exactly as if nothing happened, and a resumed run makes the same
// decisions (given a KV pool that is not under pressure at the boundary).
// A sandbox episode still running keeps its sandbox on a worker: the
// checkpoint holds its record (the episode so far, its session and lease,
// and a snapshot of its workspace where one was taken), and a resumed run
// attaches to it again while the worker still holds it, else goes on from
// the snapshot on any worker, else starts it again (same sample id and seed;
// docs/operations.md, "Resume").

#include <cstdint>

#include "absl/status/status.h"
#include "loom/train/adamw.h"
#include "loom/train/async_loop.h"
#include "loom/train/train_state.h"
#include "train/context.h"

namespace loom::train {

// Borrowed views of an async stage's state.
struct AsyncStageState {
  const char* stage;  // kGrpoStage, kOpdStage: the checkpoint's stage name
  AsyncLoop& loop;    // its step, engine, dispatcher, samples and environment
  AdamW& optimizer;
};

// Checkpoint boundary of an async stage's loop (between engine steps;
// `after_step` right after an optimizer step). PreemptedStatus() after a
// preemption save.
absl::Status AsyncBoundary(TrainContext& context, AsyncStageState loop, bool after_step);

// Restores an async stage from the checkpoint being resumed, if it stopped
// in this stage (otherwise does nothing): the optimizer, and the loop's
// state with `prompts` reopening its samples (AsyncLoop::Import).
absl::Status RestoreAsync(TrainContext& context, AsyncStageState loop, PromptSource& prompts);

// Checkpoint boundary of the SFT stage after `step` optimizer steps
// (`after_step`: one just finished); `cursor` is the sampler's data cursor.
absl::Status SftBoundary(TrainContext& context, AdamW& optimizer, const SftCursor& cursor,
                         int64_t step, bool after_step);
// Fills `optimizer`, `cursor` and `step` from the checkpoint being resumed if it
// stopped in the SFT stage; returns whether it did.
absl::StatusOr<bool> RestoreSft(TrainContext& context, AdamW& optimizer, SftCursor& cursor,
                                int64_t& step);

}  // namespace loom::train
