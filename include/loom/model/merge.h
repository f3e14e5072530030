#pragma once
// Model merging: the weighted average of same-architecture checkpoints in the
// Hugging Face layout, used to initialise a later run from earlier ones.

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace loom::model {

struct MergeOptions {
  std::vector<std::string> inputs;  // model directories (config.json + safetensors)
  std::vector<double> weights;  // one per input, or empty for equal weights; normalised to sum 1
  std::string output;           // written as config.json + model.safetensors (+ tokenizer files)
};

// Averages every tensor (accumulated in float64, written in the inputs'
// dtype). INVALID_ARGUMENT, naming what differs, when the inputs' configs,
// tensor names, shapes or dtypes disagree, or the weights are unusable.
// Nothing is written on error.
absl::Status MergeModels(const MergeOptions& options);

}  // namespace loom::model
