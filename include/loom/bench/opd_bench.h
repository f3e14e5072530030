#pragma once
// `loom bench opd`: what switching between many teachers costs an OPD step.
//
// One student and `teachers` teachers of three architectures (llama, qwen2,
// qwen3; the same widths, so every teacher costs the same to run) are
// written to a temporary directory. One fixed batch of sampled-looking
// sequences is trained on twice per round by the real OpdTrainer:
//  * spread over all teachers (sample i → teacher i mod N) with a device
//    budget (opd.teacher_memory_bytes) that holds at most 4 of them, so every
//    step brings most teachers in and evicts others;
//  * every sample on one teacher, resident throughout.
// The two runs alternate round by round (the same machine state for both);
// `switch_overhead_fraction` = median(spread step) / median(one-teacher step)
// - 1. The student is re-initialised before each step so every step does
// the same work.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::bench {

struct OpdBenchOptions {
  bool quick = false;  // fewer, shorter sequences and rounds
  int64_t teachers = 40;
  int64_t resident = 4;     // teachers the budget holds
  int64_t rounds = 5;       // measured steps per configuration (after one warm-up each)
  int64_t sequences = 640;  // the batch: 16 per teacher at 40, as a 80-prompt x 8-sample step
  uint64_t seed = 1;
};

// {"teachers", "resident_budget", "batch_sequences", "batch_tokens",
//  "step_s_one_teacher", "step_s_many_teachers", "switch_overhead_fraction",
//  "teacher_loads_per_step", "teacher_evictions_per_step", "teacher_load_s_per_step",
//  "teacher_s_per_step", "student_s_per_step", and the teacher's side kept
//  compact (hidden states + head) vs as log-prob rows for the one-teacher
//  batch: "teacher_state_bytes_*", "teacher_state_s_*", "kl_s_*" (KL forward
//  and backward), "kl_relative_difference"}
absl::StatusOr<nlohmann::json> RunOpdBench(const OpdBenchOptions& options);

}  // namespace loom::bench
