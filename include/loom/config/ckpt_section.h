#pragma once
// `ckpt:` — when `loom train` writes checkpoints, how many it keeps, and how
// long a preempted run may take to save before it exits.

#include <cstdint>

#include "loom/config/schema.h"

namespace loom::config {

struct CkptSection {
  int64_t every_steps = 0;         // optimizer steps between checkpoints; 0 = off
  double every_minutes = 0;        // wall-clock minutes between checkpoints; 0 = off
  int keep_last = 3;               // newest checkpoints always kept
  int64_t keep_every = 0;          // also keep those whose step is a multiple; 0 = none
  double preempt_deadline_s = 60;  // SIGTERM/SIGUSR1 -> checkpoint written and exit by then

  template <class V>
  void Visit(V& v) {
    v.Field("every_steps", every_steps,
            Doc("Write a checkpoint every this many optimizer steps (counted over all stages, "
                "after the step). 0 = no step interval. Each one costs a pause of about the "
                "model + optimizer size written to disk.")
                .Unit("steps")
                .Min(0));
    v.Field("every_minutes", every_minutes,
            Doc("Also write one when this many minutes passed since the last (checked after each "
                "optimizer step, so it never changes what the run computes). 0 = off.")
                .Unit("minutes")
                .Min(0));
    v.Field("keep_last", keep_last,
            Doc("Keep the newest N checkpoints (the one `latest` names is never deleted).")
                .Unit("checkpoints")
                .Min(1));
    v.Field("keep_every", keep_every,
            Doc("Additionally keep every checkpoint whose step is a multiple of this, for later "
                "evaluation or merging. 0 = none.")
                .Unit("steps")
                .Min(0));
    v.Field("preempt_deadline_s", preempt_deadline_s,
            Doc("After SIGTERM or SIGUSR1 the run stops at the next token boundary, writes a "
                "checkpoint with every in-flight sample and exits 0; if that is not done within "
                "this many seconds it exits 1 at once (resume then uses the previous checkpoint). "
                "Set it below the scheduler's grace period (Slurm --signal lead time, Kubernetes "
                "terminationGracePeriodSeconds).")
                .Unit("s")
                .Min(1));
  }
};

}  // namespace loom::config
