#pragma once
// `loom bench ckpt`: what a checkpoint with in-flight samples costs, and what
// restoring their KV saves over re-prefilling them.
//
// A random model gets `samples` in-flight samples of `prompt_tokens` tokens
// each, decoded a few tokens; they are exported (KV to host) with the model and
// an AdamW state into a real checkpoint directory (atomic write, CRC-32
// manifest), verified, read back into a fresh model and engine, and stepped
// once. The same sequences are then re-prefilled from scratch for comparison.

#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace loom::bench {

struct CkptBenchOptions {
  bool quick = false;  // a small model
  int64_t samples = 64;
  int64_t prompt_tokens = 256;
  uint64_t seed = 1;
};

// {"checkpoint_bytes", "save_s", "verify_s", "load_s", "resume_step_s",
//  "resume_prefill_tokens", "reprefill_s", "reprefill_over_resume", ...}
absl::StatusOr<nlohmann::json> RunCkptBench(const CkptBenchOptions& options);

}  // namespace loom::bench
