#pragma once
// `loom bench live`: what a live change (`loom ctl ... set`) costs the run
// loop. A change is applied at a token boundary, so rollout stands still for
// exactly as long as LiveConfig::Apply takes: the change is bound and checked
// as a whole config, and a new teacher's config.json and tokenizer.json are
// checked against the student's. Each kind of change is timed side by side
// with one decode step of the rollout engine (`batch` samples of a random
// Qwen3 student), the unit a pause is counted in.
//
//  * mix: a dataset weight (the rebind and diff of the whole config);
//  * teacher switch: a dataset to another resident teacher;
//  * teacher add: a new teacher (its tokenizer read and compared id by id:
//    with --tokenizer, a real one such as DeepSeek-V3's 128k vocabulary).

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::bench {

struct LiveBenchOptions {
  bool quick = false;     // a small student, fewer rounds
  std::string tokenizer;  // a tokenizer.json for student and teachers; "" = the tiny one
  int64_t batch = 64;     // samples decoding in the timed engine step
  int64_t rounds = 15;    // timings per kind; medians are reported
};

// {"engine_step_s", "batch", "apply_mix_s", "apply_teacher_switch_s",
//  "apply_teacher_add_s", "mix_in_engine_steps", "teacher_switch_in_engine_steps",
//  "teacher_add_in_engine_steps", "vocab_size", "rounds", "loadavg_1m"}
absl::StatusOr<nlohmann::json> RunLiveBench(const LiveBenchOptions& options);

}  // namespace loom::bench
