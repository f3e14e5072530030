#pragma once
// `async:` — how prompts are dispatched into the rollout engine and how far
// behind the policy a trained sample may be.

#include <string>

#include "loom/config/schema.h"

namespace loom::config {

struct AsyncSection {
  std::string dispatch = "sample";
  int max_inflight = 64;
  int batch_samples = 32;
  int max_staleness = 2;
  int mask_lag = -1;
  int warmup_drop_samples = 0;

  template <class V>
  void Visit(V& v) {
    v.Field("dispatch", dispatch,
            Doc("Dispatch policy. sample: whenever finished samples free room for the next "
                "prompt's whole group, dispatch it (keeps max_inflight constant); prompt: replace "
                "a prompt only when its whole group finished; batch: refill batch_samples at once "
                "after that many finished; sync: generate one batch, train, repeat (no overlap).")
                .OneOf({"sample", "prompt", "batch", "sync"}));
    v.Field("max_inflight", max_inflight,
            Doc("Samples generated concurrently (the engine's working set). More hides long tails "
                "better but costs KV memory and staleness; dispatch also pauses while in-flight "
                "plus unconsumed samples reach (max_staleness + 1) * batch_samples.")
                .Unit("samples")
                .Min(1));
    v.Field("batch_samples", batch_samples,
            Doc("Samples per training step: a step trains on complete (prompt, effort) subgroups "
                "totalling at least this many.")
                .Unit("samples")
                .Min(1));
    v.Field("max_staleness", max_staleness,
            Doc("Bound on a trained sample's version lag (policy version at the step minus the "
                "version of its oldest token). Dispatch and training wait rather than exceed it; "
                "0 is on-policy.")
                .Unit("versions")
                .Min(0));
    v.Field("mask_lag", mask_lag,
            Doc("Tokens generated more than this many versions before the step get zero loss "
                "weight. -1 = never mask.")
                .Unit("versions")
                .Min(-1));
    v.Field("warmup_drop_samples", warmup_drop_samples,
            Doc("Drop the prompt groups of the first N samples that finish (they are the short "
                "ones, which would bias early batches towards short answers). 0 = keep all.")
                .Unit("samples")
                .Min(0));
  }
};

}  // namespace loom::config
