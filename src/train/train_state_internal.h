#pragma once
// train_state.cc's helpers for the sample files (train_state_samples.cc).

#include <string>

#include "absl/status/status.h"
#include "loom/train/train_state.h"

namespace loom::train {

// Writes state.grpo's samples to dir/samples.json + dir/samples.safetensors
// (nothing when there is no GRPO cursor).
absl::Status WriteSamples(const TrainState& state, const std::string& dir);
// Fills state.grpo's inflight and finished samples from those files.
absl::Status ReadSamples(const std::string& dir, TrainState& state);

}  // namespace loom::train
