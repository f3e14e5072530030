#pragma once
// `dist:` — how the ranks of a multi-rank run (torchrun, Slurm, `loom
// launch`) talk. Where each rank sits comes from the environment
// (loom/dist/rank.h); this section says how long to wait for a peer and how
// gradients travel. A one-rank run ignores it.

#include <cstdint>

#include "loom/config/schema.h"

namespace loom::config {

struct DistSection {
  double timeout_s = 300;       // every collective; a dead peer fails sooner
  double join_timeout_s = 600;  // the rendezvous: every rank started and connected
  int64_t bucket_mb = 32;       // gradient all-reduce bucket size

  template <class V>
  void Visit(V& v) {
    v.Field("timeout_s", timeout_s,
            Doc("How long a rank waits for its peers in every collective. A rank that exited is "
                "noticed at once (its connection closes); one that hangs, after this long. Then "
                "every other rank exits with an error naming the operation. Longer than the "
                "slowest stretch one rank can spend alone (a held-out evaluation, a checkpoint "
                "write).")
                .Unit("seconds")
                .Range(1, 86400));
    v.Field("join_timeout_s", join_timeout_s,
            Doc("How long a starting rank waits for every other to join the process group "
                "(ranks start at their own pace: a scheduler's delay, a slow file system). Past "
                "it each rank that did start exits with an error naming the rendezvous address.")
                .Unit("seconds")
                .Range(1, 86400));
    v.Field("bucket_mb", bucket_mb,
            Doc("Gradients are summed across ranks in buckets of at most this size, one "
                "all-reduce each: larger buckets mean fewer, longer calls.")
                .Unit("MiB")
                .Range(1, 4096));
  }
};

}  // namespace loom::config
