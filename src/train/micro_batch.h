#pragma once
// A trainer's step in micro-batches: which samples are scored together, and
// how they are packed for teacher forcing. Private to the train module.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "loom/train/batching.h"
#include "loom/train/sample_table.h"

namespace loom::train {

// Samples scored together: one temperature (each sample is scored at the one
// it was drawn with), at most max_tokens tokens unless a sample alone is longer.
struct MicroBatch {
  double temperature = 1.0;
  std::vector<size_t> samples;  // indices into the step's samples
};

// The micro-batches of `samples[chosen]`, in `chosen`'s order within each
// temperature.
std::vector<MicroBatch> MicroBatches(const std::vector<TrainingSample>& samples,
                                     const std::vector<size_t>& chosen, int64_t max_tokens);

// A micro-batch's samples packed for teacher forcing: the batch (with the
// samples' MoE routing to replay) and, in its shifted [T] layout, the
// weight of each target, the recorded behaviour log-probs and versions.
struct PackedSamples {
  ShiftedBatch shifted;
  at::Tensor behaviour;          // [T] float32
  at::Tensor versions;           // [T] int64
  std::vector<int64_t> lengths;  // per sample
  at::Tensor index;              // [n] int64: each sample's index in the step
};

PackedSamples PackSamples(const std::vector<TrainingSample>& samples,
                          const std::vector<size_t>& indices);

}  // namespace loom::train
