#pragma once
// `run:` — what the run is called, where it writes, and process-wide knobs.

#include <cstdint>
#include <string>

#include "loom/config/schema.h"

namespace loom::config {

struct RunSection {
  std::string name;  // required; names the run directory
  std::string dir;   // "" = runs/<name>
  int64_t seed = 0;  // root of every random stream in the run
  bool deterministic = false;
  int threads = 0;               // intra-op CPU threads; 0 = all cores
  int64_t cpu_cache_mib = 2048;  // idle CPU tensor memory kept for reuse; 0 = none
  std::string log_level = "info";

  template <class V>
  void Visit(V& v) {
    v.Field("name", name,
            Doc("Name of the run; the run directory defaults to runs/<name>.").Required());
    v.Field("dir", dir,
            Doc("Run directory (config.yaml, log.txt, metrics.jsonl, checkpoints/). Empty means "
                "runs/<name> under the working directory."));
    v.Field("seed", seed,
            Doc("Root seed: model init, data generation and every sample's sampler derive from it.")
                .Min(0));
    v.Field("deterministic", deterministic,
            Doc("Make every scheduling decision independent of wall-clock time so a preempted and "
                "resumed run repeats the uninterrupted one exactly. With sandbox episodes the "
                "engine then waits for the workers' answers before every step. Costs some "
                "throughput."));
    v.Field("threads", threads,
            Doc("Intra-op CPU threads for LibTorch. 0 uses every core; fewer leaves cores for "
                "sandbox workers.")
                .Unit("threads")
                .Range(0, 1024));
    v.Field("cpu_cache_mib", cpu_cache_mib,
            Doc("Freed CPU tensor blocks of 1 MiB and more kept for reuse, at most this much "
                "idle memory. Without it every large tensor (attention scores in training) is "
                "page-faulted in again each micro-batch, which costs several times the compute "
                "on virtual machines. 0 gives every block back to the system.")
                .Unit("MiB")
                .Min(0));
    v.Field("log_level", log_level,
            Doc("Log verbosity for the console and log.txt; --log-level overrides it.")
                .OneOf({"trace", "debug", "info", "warn", "error", "off"}));
  }
};

}  // namespace loom::config
