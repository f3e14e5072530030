#pragma once
// The GRPO stage: the asynchronous run loop of ARCHITECTURE.md.
//
//   loop:
//     dispatcher.Refill(engine)       admit prompt groups (policy, caps, staleness)
//     engine.Step()                   prefill / decode one token per active sample
//     finished samples -> dispatcher  (kept for training, or dropped in warm-up)
//     if dispatcher.TakeBatch(v):     complete (prompt, effort) subgroups are ready
//        engine.ParkAll()             already at a token boundary
//        judge + reward + advantages  verifier, length reward, subgroup centring
//        clipped policy loss          against the recorded behaviour log-probs
//        AdamW step; v += 1
//        engine.Resume(v)             parked samples continue on their KV
//
// One thread (the caller's) does all of it; the engine and the optimizer
// never see another thread.

#include "absl/status/status.h"
#include "loom/train/context.h"

namespace loom::train {

absl::Status RunGrpoStage(TrainContext& context);

}  // namespace loom::train
