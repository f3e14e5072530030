#pragma once
// `loom bench dist`: what a second rank buys. The same SFT work — the same
// global batch of the same examples, the same steps — runs as 1 rank × 1
// thread and then as 2 ranks × 1 thread (`loom launch`, Gloo on loopback),
// side by side in one invocation, each a real `loom train` process tree on a
// run directory of its own under `dir`. Throughput is training samples per
// second of optimizer-step time (the first 3 steps, a warm-up, left out); the
// all-reduce share is the 2-rank run's gradient all-reduce time (waiting for
// the slower rank included) over its step time. Both runs also log the loss
// of every step, so the result says how far they drifted apart. Then two
// unconnected 1-rank runs on half the batch each run at once: their summed
// throughput is what this machine gives two processes (the ceiling), and
// speedup / ceiling is the scaling efficiency of loom's data parallelism.
// The three runs repeat in rounds (a slow spell of a shared machine then
// hits all three of a round); the figures are medians over the rounds, and
// `speedup_2_ranks_vs_1` the median of the rounds' speedups.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::bench {

struct DistBenchOptions {
  std::string binary;  // the loom binary the ranks run
  std::string dir;     // scratch directory (created; the runs are left there)
  bool quick = false;  // a smaller model and batch, a few steps
  int64_t steps = 0;   // 0: 30 (quick: 6)
  int64_t batch = 0;   // global batch in sequences; 0: 256 (quick: 16)
  int rounds = 0;      // rounds of the three runs, medians reported; 0: 3 (quick: 1)
};

// {"ranks", "threads_per_rank", "steps", "batch_sequences", "timed_steps",
//  "rounds", "samples_per_s_1_rank", "samples_per_s_2_ranks",
//  "samples_per_s_2_independent", "speedups", "ceiling_2_vs_1", "scaling_efficiency",
//  "allreduce_share", "allreduce_ms_per_step", "max_loss_diff", "load_avg_start",
//  "speedup_2_ranks_vs_1"}
absl::StatusOr<nlohmann::json> RunDistBench(const DistBenchOptions& options);

}  // namespace loom::bench
