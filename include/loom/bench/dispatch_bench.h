#pragma once
// `loom bench dispatch`: the real engine, model and optimizer on a long-tail
// workload, once per dispatch policy, to measure what sample-level dispatch
// buys over synchronous generate-then-train.
//
// Every sample's response length is drawn from a heavy-tailed (Pareto)
// distribution and forced by ignoring EOS until that length. Each policy
// runs the same loop as the GRPO stage — refill, engine step, finished
// samples to the dispatcher, and on a ready batch: park, one real training
// step (forward, backward, AdamW on the batch's tokens), resume — until it has
// trained `train_steps` batches. Throughput is trained samples per second.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::bench {

struct DispatchBenchOptions {
  bool quick = false;
  std::vector<std::string> modes = {"sync", "batch", "prompt", "sample"};
  int64_t train_steps = 8;  // batches trained per mode
  int batch_samples = 32;   // samples per training step
  int max_inflight = 64;
  int group_size = 4;         // samples per prompt
  int max_staleness = 8;      // async.max_staleness of every async mode (4 stalls on the tail)
  int64_t min_length = 8;     // shortest response (Pareto scale)
  int64_t max_length = 384;   // longest response (cap)
  double pareto_alpha = 1.1;  // tail index: smaller = heavier tail
  uint64_t seed = 1;
};

// Runs every mode; the result has one object per mode under "modes" and
// `speedup_sample_vs_sync` at the top level.
absl::StatusOr<nlohmann::json> RunDispatchBench(const DispatchBenchOptions& options);

}  // namespace loom::bench
