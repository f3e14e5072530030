#pragma once
// The measurements behind `loom bench rollout`: decode throughput by batch
// size, interruption latency, resume-with-KV vs re-prefill after a weight
// update, and KV memory efficiency — or, with `prefix`, prefix sharing on a
// GRPO group and on agent episodes — all on one small random model (or a model
// directory) in this process. Timings are wall-clock; the ratios are what the
// targets (TARGETS.md) are about.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::bench {

struct RolloutBenchOptions {
  std::string model_dir;  // "" = a random llama (hidden 32, 1 layer, vocab 512)
  std::vector<int64_t> batch_sizes = {1, 8, 64};
  int64_t decode_tokens = 128;  // new tokens per sample in the throughput runs
  int64_t interrupt_rounds = 100;
  int64_t resume_samples = 64;
  int64_t resume_prefix = 1024;  // tokens cached per sample at the weight update
  uint64_t seed = 0;
  // `--prefix`: prefix sharing instead of the measurements above, each
  // workload run without and with sharing side by side.
  bool prefix = false;
  int64_t group_size = 16;  // a GRPO group: samples of one prompt
  int64_t group_prompt = 2048;
  int64_t agent_episodes = 64;  // agent episodes sharing one system prompt
  int64_t agent_system = 4096;
  int64_t agent_task = 64;          // each episode's own tokens after the system prompt
  int64_t prefix_new_tokens = 128;  // generated per sample in both workloads
};

// The defaults shrunk to finish within a minute on 2 CPU cores (the resume
// measurement keeps 64 samples with 1024-token prefixes; the prefix workloads
// keep their sizes but generate 32 tokens).
RolloutBenchOptions QuickRolloutBench();

// Runs every measurement; the result is one JSON object (see docs/PERFORMANCE.md).
absl::StatusOr<std::string> RunRolloutBench(const RolloutBenchOptions& options);

}  // namespace loom::bench
